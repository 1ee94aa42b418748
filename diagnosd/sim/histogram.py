"""A cumulative histogram fed with expected observation counts, and the bucket bounds exporters use.

Counts are kept fractional (the fluid model observes 12.4 requests in a tick) and exposed rounded
down, which keeps every bucket cumulative, the +Inf bucket equal to `_count`, and all of them
monotone between scrapes. Bounds are copied from the exporters' sources (see known_metrics.txt).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnosd.sim.distributions import Shape, expected, shares, with_inf


@dataclass
class Histogram:
    bounds: tuple[float, ...]  # ends with +Inf
    cum: list[float] = field(default_factory=list)
    total: float = 0.0
    _shares: dict[Shape, tuple[tuple[float, ...], float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.cum:
            self.cum = [0.0] * len(self.bounds)

    def observe(self, count: float, dist: Shape) -> None:
        if count <= 0.0:
            return
        found = self._shares.get(dist)
        if found is None:
            found = self._shares[dist] = (shares(dist, self.bounds), expected(dist))
        self.cum = [c + count * s for c, s in zip(self.cum, found[0])]  # noqa: B905 - equal lengths by construction
        self.total += count * found[1]

    @property
    def count(self) -> float:
        return self.cum[-1]


def one_two_five(limit: float) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, … while <= limit."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > limit:
                return with_inf(out)
            out.append(float(value))
        exponent += 1


# fmt: off
VLLM_TTFT = with_inf([
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
])
VLLM_ITL = with_inf([
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
])
VLLM_LATENCY = with_inf([
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
])
VLLM_ITERATION = with_inf([1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384])
VLLM_PARAMS_N = with_inf([1, 2, 5, 10, 20])
VLLM_PREEMPTIONS = with_inf([1, 2, 3, 4, 5, 10, 20])

SGLANG_TTFT = with_inf([0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400])
SGLANG_E2E = with_inf([*SGLANG_TTFT[:-1], 600, 1200, 1800, 2400])
SGLANG_ITL = with_inf([
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400,
    0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
])
SGLANG_QUEUE = with_inf([
    0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
])
SGLANG_TOKENS = with_inf([
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000, 17500, 20000,
    22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000, 300000, 400000, 600000, 800000, 1000000,
    1100000,
])

# LiteLLM LATENCY_BUCKETS (litellm/types/integrations/prometheus.py) and prometheus_client's default.
LITELLM_LATENCY = with_inf([
    0.005, 0.00625, 0.0125, 0.025, 0.05, 0.1, 0.5, *(1.0 + 0.5 * i for i in range(19)),
    15.0, 20.0, 25.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0,
])
CLIENT_DEFAULT = with_inf([0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0])
# fmt: on


@dataclass(frozen=True)
class Bounds:
    """The bucket bounds one engine uses for each histogram the model keeps."""

    ttft: tuple[float, ...]
    itl: tuple[float, ...]
    e2e: tuple[float, ...]
    queue: tuple[float, ...]
    phase: tuple[float, ...]
    tokens: tuple[float, ...]


def vllm_bounds(max_model_len: int) -> Bounds:
    return Bounds(VLLM_TTFT, VLLM_ITL, VLLM_LATENCY, VLLM_LATENCY, VLLM_LATENCY, one_two_five(max_model_len))


SGLANG_BOUNDS = Bounds(SGLANG_TTFT, SGLANG_ITL, SGLANG_E2E, SGLANG_QUEUE, SGLANG_E2E, SGLANG_TOKENS)

"""The workload model of one engine pod: arrivals in, a fluid queue, batch and KV limits, latencies out.

Every exported number of a pod comes from this one state, so they agree with each other: the
TTFT histogram holds the queue wait the waiting gauge implies, the prefix-cache counters the
hit ratio the prompt sources imply, the GPU the step time the inter-token latency shows.
A tick advances the state by `dt` seconds at the arrival rate the gateway routed to the pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from diagnosd.sim import defaults
from diagnosd.sim.distributions import LogNormal, Shape, point, shape
from diagnosd.sim.histogram import VLLM_ITERATION, VLLM_PARAMS_N, VLLM_PREEMPTIONS, Bounds, Histogram
from diagnosd.sim.spec import EngineKind, GpuSpec, ModelSpec, Names, PodKnobs

MIB = 1 << 20
GIB = 1 << 30
EAGER_MS = 10.0  # kernel launches per step without CUDA graphs (--enforce-eager, --disable-cuda-graph)
REASONS = ("stop", "length", "abort", "error", "repetition")
HUNG_S = 1e6  # the first token of a request sent to a stuck engine: never, past any client timeout


@dataclass(frozen=True)
class Capacity:
    """KV-cache size from the memory budget, and the running-request limit the engine picks
    itself where --max-num-seqs is unset, as the engine computes them at start."""

    kv_tokens: float
    num_gpu_blocks: int
    default_max_num_seqs: int


def capacity(
    knobs: PodKnobs, model: ModelSpec, gpu: GpuSpec, engine: EngineKind = "vllm", names: Names = "v1"
) -> Capacity:
    budget = knobs.gpu_memory_utilization * gpu.fb_total_mib * MIB - (model.weights_gib + model.activation_gib) * GIB
    blocks = max(1, int(budget / kv_bytes(knobs, model)) // knobs.block_size)
    tokens = float(blocks * knobs.block_size)
    seqs = defaults.max_num_seqs(engine, names, gpu, tokens, knobs.max_model_len)
    if engine == "vllm":  # a defaulted --max-num-seqs never exceeds --max-num-batched-tokens
        seqs = min(seqs, knobs.max_num_batched_tokens)
    return Capacity(tokens, blocks, seqs)


def max_num_seqs(k: PodKnobs, cap: Capacity) -> int:
    """The running-request limit in force: the pod's flag where set, else the engine's own."""
    return k.max_num_seqs if k.max_num_seqs is not None else cap.default_max_num_seqs


def kv_bytes(knobs: PodKnobs, model: ModelSpec) -> float:
    """KV-cache bytes per token on one GPU; an FP8 cache halves them."""
    return model.kv_bytes_per_token / (2.0 if knobs.kv_cache_dtype.startswith("fp8") else 1.0)


@dataclass(frozen=True)
class Tick:
    """Means over the last tick: what exporters, the GPU and the gateway read."""

    arrivals: float = 0.0  # requests/s offered
    served: float = 0.0  # requests/s finished
    prompt_mean: float = 0.0
    output_mean: float = 0.0
    hit: float = 0.0  # token-weighted prefix-cache hit ratio
    cache_share: float = 0.0  # share of a regular prompt found in the cache
    step_s: float = 0.0
    prefill_share: float = 0.0  # of the GPU's time spent on prefill
    mem_ms: float = 0.0  # memory traffic per step, in ms at full bandwidth
    ttft: float = 0.0
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    tokens_per_step: float = 0.0
    preemptions: float = 0.0  # per second
    evicted: float = 0.0  # cached prefix tokens evicted per second

    @property
    def steps_per_s(self) -> float:
        return 1.0 / self.step_s if self.step_s else 0.0

    @property
    def e2e(self) -> float:
        return self.ttft + self.decode_s


@dataclass
class Engine:
    """The cumulative and current state of one engine process (new when its container restarts)."""

    started: float
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    kv_in_flight: float = 0.0  # requests whose KV is being pulled (decode side of PD, see pd.py)
    counters: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Histogram] = field(default_factory=dict)
    tick: Tick = field(default_factory=Tick)

    def count(self, name: str, amount: float) -> None:
        if amount > 0.0:
            self.counters[name] = self.counters.get(name, 0.0) + amount

    def hist(self, name: str, bounds: tuple[float, ...]) -> Histogram:
        found = self.hists.get(name)
        if found is None:
            found = self.hists[name] = Histogram(bounds)
        return found


@dataclass(frozen=True)
class Request:
    """The request mix of a tick, from the pod's knobs."""

    prompt: Shape
    computed: Shape
    output: Shape
    prompt_mean: float
    output_mean: float
    length_share: float
    hit: float

    @classmethod
    def of(cls, k: PodKnobs, hit: float) -> Request:
        """`hit` is the share of a regular prompt found in the prefix cache; long prompts (whole
        documents) are not, so the token-weighted `Request.hit` is lower when they are present."""
        tail, long = k.long_prompt_share, k.long_prompt_tokens
        raw = LogNormal(k.output_tokens, k.output_spread)
        prompt_mean = (1 - tail) * k.prompt_tokens + tail * long
        return cls(
            prompt=shape(k.prompt_tokens, k.prompt_spread, tail_mean=long, tail_share=tail),
            computed=shape(k.prompt_tokens * (1 - hit), k.prompt_spread, tail_mean=long, tail_share=tail),
            output=shape(k.output_tokens, k.output_spread, cap=k.max_tokens),
            prompt_mean=prompt_mean,
            output_mean=raw.capped_mean(k.max_tokens),
            length_share=1.0 - raw.cdf(k.max_tokens),
            hit=(1 - tail) * k.prompt_tokens * hit / prompt_mean,
        )

    @property
    def computed_mean(self) -> float:
        return self.prompt_mean * (1.0 - self.hit)


def hit_ratio(k: PodKnobs, kv_usage: float) -> float:
    """Prefix-cache hit ratio: what the traffic could reuse, less what a full pool evicted."""
    if not k.prefix_caching:
        return 0.0
    pressure = min(1.0, max(0.0, (kv_usage - 0.92) / 0.06))
    return k.prefix_reuse * (1.0 - 0.5 * pressure)


@dataclass(frozen=True)
class Plan:
    """How fast a pod can go this tick: step time as a function of load, slots, capacity."""

    k: PodKnobs
    req: Request
    kv_per_request: float
    max_num_seqs: int
    slots: float  # requests that fit (max-num-seqs or the KV pool, whichever binds)
    weights_ms: float  # reading the weights once, per step
    kv_ms: float  # reading one running request's KV cache, per step
    fixed_ms: float  # launch overhead and host time per step
    prefill_ms: float  # per computed prompt token
    per_seq_ms: float  # decode compute per running sequence

    @classmethod
    def of(cls, k: PodKnobs, model: ModelSpec, gpu: GpuSpec, cap: Capacity, req: Request) -> Plan:
        kv_per_request = req.prompt_mean * (1.0 - 0.7 * req.hit) + req.output_mean / 2.0 + k.block_size
        seqs = max_num_seqs(k, cap)
        slots = min(float(seqs), 0.98 * cap.kv_tokens / kv_per_request)
        bandwidth = gpu.bandwidth_gbs * 1e9 / 1000.0  # bytes per ms
        context = req.prompt_mean + req.output_mean / 2.0
        return cls(
            k=k,
            req=req,
            kv_per_request=kv_per_request,
            max_num_seqs=seqs,
            slots=slots,
            weights_ms=model.weights_gib * GIB / bandwidth,
            kv_ms=context * kv_bytes(k, model) / bandwidth,
            fixed_ms=k.step_overhead_ms + (EAGER_MS if k.enforce_eager else 0.0),
            prefill_ms=1000.0 / (k.prefill_tokens_per_s * k.clock_factor * (1.0 - k.gpu_contention)),
            per_seq_ms=model.decode_ms_per_seq,
        )

    @property
    def busy_slots(self) -> float:
        return max(self.slots, 0.5)

    def mem_ms(self, running: float) -> float:
        return self.weights_ms + running * self.kv_ms

    def prefill_share(self, rate: float) -> float:
        return min(0.95, rate * self.req.computed_mean * self.prefill_ms / 1000.0)

    def step_s(self, running: float, rate: float) -> float:
        k = self.k
        mem, compute = self.mem_ms(running), running * self.per_seq_ms
        gpu = (max(mem, compute) + 0.3 * min(mem, compute)) / k.clock_factor  # loads and math overlap
        decode_ms = (gpu + self.fixed_ms) / (1.0 - k.gpu_contention) + k.host_ms
        return decode_ms / (1.0 - self.prefill_share(rate)) / 1000.0

    def times(self, running: float, rate: float) -> tuple[float, float, float]:
        """(step, prefill per request, time in the engine per request), in seconds.

        A request's prefill is its own prompt's compute plus the steps its chunks ride on.
        """
        step_s = self.step_s(running, rate)
        chunks = max(1.0, self.req.computed_mean / max(256.0, self.k.max_num_batched_tokens - running))
        prefill_s = step_s * chunks + self.req.computed_mean * self.prefill_ms / 1000.0
        return step_s, prefill_s, prefill_s + self.req.output_mean * step_s

    def capacity_rate(self) -> float:
        """The most requests/s this pod can finish: the rate at which every usable slot is busy.

        More traffic means more prefill in every step and slower decoding, so the rate that fills
        the slots is found by bisection below the prefill limit.
        """
        slots = self.busy_slots
        high = 0.95 * 1000.0 / max(self.req.computed_mean * self.prefill_ms, 1e-9)
        if high * self.times(slots, high)[2] <= slots:
            return high
        low = 0.0
        for _ in range(14):
            mid = (low + high) / 2.0
            low, high = (mid, high) if mid * self.times(slots, mid)[2] <= slots else (low, mid)
        return low

    def running(self, served: float, start: float) -> float:
        """Requests running at a served rate: a few rounds of Little's law with the load-dependent step."""
        running = min(self.busy_slots, start or 1.0)
        for _ in range(4):
            running = min(self.busy_slots, served * self.times(running, served)[2])
        return running


def step(engine: Engine, k: PodKnobs, spec: tuple[ModelSpec, GpuSpec, Capacity], arrivals: float, dt: float) -> None:
    """Advance one engine by `dt` seconds at `arrivals` requests/s."""
    model, gpu, cap = spec
    share = hit_ratio(k, engine.kv_usage)
    req = Request.of(k, share)
    plan = Plan.of(k, model, gpu, cap, req)
    limit = plan.capacity_rate()
    offered = engine.waiting + arrivals * dt
    served_n = min(offered, limit * dt)
    abandoned = (offered - served_n) * min(1.0, dt / k.client_patience)
    engine.waiting = offered - served_n - abandoned
    served = served_n / dt
    saturated = served_n >= limit * dt * 0.999
    running = plan.busy_slots if saturated else plan.running(served, engine.running)
    engine.running = running
    engine.kv_usage = min(1.0, engine.running * plan.kv_per_request / cap.kv_tokens)
    engine.tick = _tick(engine, plan, arrivals, served, running, limit, share)
    engine.count("abandoned", abandoned)  # aborted while queued: booked by account()


def hang(engine: Engine, arrivals: float) -> None:
    """A stuck engine loop (vllm-project/vllm#2731, #17972): no step, so no counter, histogram or
    gauge moves (vLLM V1 records its gauges from each step's scheduler stats, and the API server
    keeps exporting the last ones); what reaches the engine is never answered."""
    engine.tick = replace(engine.tick, arrivals=arrivals, served=0.0, ttft=HUNG_S, queue_s=HUNG_S)


def _tick(
    engine: Engine, plan: Plan, arrivals: float, served: float, running: float, limit: float, share: float
) -> Tick:
    k, req = plan.k, plan.req
    load = min(0.995, served / max(limit, 1e-9))
    # Requests that waited longer than the clients' patience were abandoned, not served.
    queue_s = min((engine.waiting + load**12 / (1.0 - load) * 0.5) / max(served, 1e-9), k.client_patience)
    step_s, prefill_s, _ = plan.times(running, served)
    kv_bound = plan.slots < plan.max_num_seqs and engine.waiting > 1.0
    return Tick(
        arrivals=arrivals,
        served=served,
        prompt_mean=req.prompt_mean,
        output_mean=req.output_mean,
        hit=req.hit,
        cache_share=share,
        step_s=step_s,
        prefill_share=plan.prefill_share(served),
        mem_ms=plan.mem_ms(engine.running),
        ttft=queue_s + prefill_s + 0.012 + req.prompt_mean * 4e-6,
        queue_s=queue_s,
        prefill_s=prefill_s,
        decode_s=max(req.output_mean - 1.0, 0.0) * step_s,
        tokens_per_step=running + served * req.computed_mean * step_s,
        preemptions=0.08 * served if kv_bound else 0.0,
        evicted=served * req.prompt_mean * k.prefix_reuse * max(0.0, engine.kv_usage - 0.85) * k.prefix_caching,
    )


def account(engine: Engine, k: PodKnobs, bounds: Bounds, dt: float) -> None:
    """Counters and histograms of the requests that left the engine in the last tick.

    `n` requests were served: prefilled and streamed until they finished or, `abort_share` of
    them, until their client went away. `finished:abort` books every abort, those still queued
    (`abandoned`) too: what really happened, which each exporter reports its own way. vLLM (V1
    and V0) reports none of it (OutputProcessor.abort_requests skips the finished-request stats;
    V0's scheduler drops an aborted group before its stats see it), SGLang counts them all.
    """
    t = engine.tick
    req = Request.of(k, t.cache_share)
    n = t.served * dt
    midstream = n * k.abort_share
    errors = n * k.error_share
    length = max(n * (1 - k.abort_share - k.error_share), 0.0) * req.length_share
    stop = max(n * (1 - k.abort_share - k.error_share) - length, 0.0)
    aborted = midstream + engine.counters.pop("abandoned", 0.0)
    for reason, amount in zip(REASONS, (stop, length, aborted, errors, 0.0), strict=True):
        engine.count(f"finished:{reason}", amount)
    # vLLM V1 counts a prompt at the request's first token (IterationStats.update_from_output):
    # a stream aborted mid-way is in prompt_tokens_total, a request abandoned in the queue is not.
    engine.count("prompt_tokens", n * t.prompt_mean)
    engine.count("generation_tokens", n * t.output_mean)
    if k.prefix_caching:
        engine.count("prefix_queries", n * t.prompt_mean)
        engine.count("prefix_hits", n * t.prompt_mean * t.hit)
    engine.count("computed_tokens", n * t.prompt_mean * (1 - t.hit))
    engine.count("preemptions", t.preemptions * dt)
    engine.count("evicted_tokens", t.evicted * dt)
    engine.count("busy_seconds", dt * min(1.0, engine.running))
    engine.count("forward_passes", t.steps_per_s * dt)
    engine.count("forward_balancedness", t.steps_per_s * dt * k.expert_balancedness)
    _observe(engine, k, req, bounds, (n, n - midstream), dt)


def _ttft(k: PodKnobs, t: Tick, req: Request) -> Shape:
    """First-token times: regular prompts around the tick's mean, whole documents much later."""
    if not k.long_prompt_share:
        return shape(t.ttft, 0.5)
    long = t.ttft + (k.long_prompt_tokens - req.computed_mean) * (t.prefill_s / max(req.computed_mean, 1.0))
    return shape(t.ttft, 0.5, tail_mean=max(long, t.ttft), tail_share=k.long_prompt_share)


def _step_tokens(k: PodKnobs, t: Tick) -> Shape:
    """Tokens per engine step; with long prompts, some steps carry a whole chunk of one of them
    (up to --max-num-batched-tokens: with chunked prefill off, the whole prompt)."""
    regular = max(t.tokens_per_step, 1.0)
    if not k.long_prompt_share or not t.steps_per_s:
        return shape(regular, 0.5)
    chunk = min(k.long_prompt_tokens, float(k.max_num_batched_tokens))
    steps = t.served * k.long_prompt_share * max(1.0, k.long_prompt_tokens / chunk) / t.steps_per_s
    return shape(regular, 0.5, tail_mean=max(chunk, regular), tail_share=min(0.5, steps))


def _observe(engine: Engine, k: PodKnobs, req: Request, b: Bounds, served: tuple[float, float], dt: float) -> None:
    """`served` = (requests served, of which finished). First-token and inter-token times are taken
    per engine step, aborted streams' too; every per-request histogram holds finished requests only
    (vLLM's finished-request stats; SGLang also observes its aborts, left out here: its abort share
    is read from its own counter and aborted requests are shaped like the rest)."""
    n, done = served
    t, h = engine.tick, engine.hist
    h("ttft", b.ttft).observe(n, _ttft(k, t, req))
    h("itl", b.itl).observe(n * max(t.output_mean - 1.0, 0.0), shape(t.step_s, 0.12 + 0.5 * t.prefill_share))
    h("tpot", b.itl).observe(done, shape(t.step_s, 0.12))
    h("e2e", b.e2e).observe(done, shape(t.e2e, 0.6))
    h("queue", b.queue).observe(done, shape(max(t.queue_s, 1e-4), 0.9))
    h("prefill", b.phase).observe(done, shape(t.prefill_s, 0.5))
    h("decode", b.phase).observe(done, shape(max(t.decode_s, 1e-4), 0.7))
    h("inference", b.phase).observe(done, shape(t.prefill_s + t.decode_s, 0.7))
    h("prompt", b.tokens).observe(done, req.prompt)
    h("computed", b.tokens).observe(done, req.computed)
    h("generation", b.tokens).observe(done, req.output)
    h("max_tokens", b.tokens).observe(done, point(k.max_tokens))
    h("params_n", VLLM_PARAMS_N).observe(done, point(1.0))
    h("preempted", VLLM_PREEMPTIONS).observe(done, point(0.0))
    h("iteration", VLLM_ITERATION).observe(t.steps_per_s * dt, _step_tokens(k, t))


def cpu_cores(k: PodKnobs, engine: Engine) -> float:
    """CPU of the engine's API server process: tokenising prompts, detokenising outputs (one GIL)."""
    t = engine.tick
    tokens = t.served * (t.prompt_mean + t.output_mean)
    return min(0.99, 0.08 + tokens * k.tokenizer_us_per_token * 1e-6)

"""The LiteLLM gateway: tenants' requests per model group, routed to the pods behind each group.

Routing happens before the engines tick (the pods' arrival rates come from here); accounting
after, from what the engines did: a backend whose latency passes the group timeout fails with
408, a failing backend is cooled down and loses its share, failed requests fall back. The
counters are kept by exposed series (name, labels), created on their first event as LiteLLM does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from diagnosd.sim.distributions import LogNormal, shape
from diagnosd.sim.exposition import Labels
from diagnosd.sim.fleet import ApiKey, Layout, Pod
from diagnosd.sim.histogram import Histogram
from diagnosd.sim.model import Engine
from diagnosd.sim.spec import GroupKnobs, KeyKnobs, PodKnobs

UNLIMITED = 9223372036854775807.0  # sys.maxsize: LiteLLM's "no limit" for a key
PROVIDER = "hosted_vllm"
Key = tuple[str, Labels]


@dataclass(frozen=True)
class Flow:
    """One tenant's traffic to one pod of a group in one tick (requests/s)."""

    key: ApiKey
    group: str
    pod: Pod
    client_rps: float  # client requests whose final deployment is this pod
    attempts: float  # LLM API calls sent to this pod (retries included)


@dataclass
class Gateway:
    counters: dict[Key, float] = field(default_factory=dict)
    hists: dict[Key, Histogram] = field(default_factory=dict)
    gauges: dict[Key, float] = field(default_factory=dict)
    cooled: dict[str, float] = field(default_factory=dict)  # pod key -> share of time in cooldown
    flows: list[Flow] = field(default_factory=list)
    # At routing time: pod key -> (share of calls failing at the load balancer, share timing out),
    # and model group -> chance that one call to it fails.
    health: dict[str, tuple[float, float]] = field(default_factory=dict)
    group_fail: dict[str, float] = field(default_factory=dict)

    def count(self, name: str, labels: Labels, amount: float) -> None:
        if amount > 0.0:
            self.counters[(name, labels)] = self.counters.get((name, labels), 0.0) + amount

    def observe(self, name: str, labels: Labels, bounds: tuple[float, ...], n: float, mean: float) -> None:
        if n > 0.0:
            self.hists.setdefault((name, labels), Histogram(bounds)).observe(n, shape(mean, 0.5))


@dataclass(frozen=True)
class Knobs:
    """The knobs in force this tick (faults applied), by group name, key alias and pod key."""

    groups: Mapping[str, GroupKnobs]
    keys: Mapping[str, KeyKnobs]
    pods: Mapping[str, PodKnobs]


def failure_share(k: PodKnobs, group: GroupKnobs, engine: Engine | None) -> tuple[float, float]:
    """(share of calls to this pod that fail at the load balancer, share that time out)."""
    if engine is None:
        return 1.0, 0.0
    t = engine.tick
    late = 0.0
    if t.served > 0.0 or t.arrivals > 0.0:  # a stuck engine serves nothing: every call times out
        late = group.streaming_share * _beyond(t.ttft, group.timeout) + (1 - group.streaming_share) * _beyond(
            t.e2e, group.timeout
        )
    return k.gateway_failure_share, min(late, 1.0 - k.gateway_failure_share)


def _beyond(mean: float, limit: float) -> float:
    return 1.0 - LogNormal(max(mean, 1e-6), 0.6).cdf(limit)


def route(gw: Gateway, layout: Layout, knobs: Knobs, engines: dict[str, Engine | None], diurnal: float) -> None:
    """Split every tenant's traffic over the pods of each group; sets flows, health and group_fail."""
    gw.flows = []
    assert layout.fleet.gateway is not None
    for group in layout.fleet.gateway.groups:
        g = knobs.groups[group.name]
        pods = layout.group_pods(group)
        for pod in pods:
            gw.health[pod.key] = failure_share(knobs.pods[pod.key], g, engines[pod.key])
        weights = {p.key: knobs.pods[p.key].routing_weight * (1.0 - gw.cooled.get(p.key, 0.0)) for p in pods}
        total = sum(weights.values()) or 1.0
        p_fail = sum(weights[p.key] / total * sum(gw.health[p.key]) for p in pods)
        gw.group_fail[group.name] = p_fail
        per_client = sum(p_fail**i for i in range(g.num_retries + 1))
        users = [key for key in layout.keys if key.spec.groups is None or group.name in key.spec.groups]
        shares = sum(knobs.keys[key.spec.alias].share for key in users) or 1.0
        for key in users:
            kk = knobs.keys[key.spec.alias]
            rate = g.rps * diurnal * kk.share / shares * kk.rate_multiplier
            for pod in pods:
                share = weights[pod.key] / total
                gw.flows.append(Flow(key, group.name, pod, rate * share, rate * share * per_client))


def arrivals(gw: Gateway, knobs: Knobs) -> dict[str, float]:
    """Requests/s reaching each engine from the gateway (load-balancer failures never get there)."""
    out: dict[str, float] = {}
    for flow in gw.flows:
        lost = knobs.pods[flow.pod.key].gateway_failure_share
        out[flow.pod.key] = out.get(flow.pod.key, 0.0) + flow.attempts * (1.0 - lost)
    return out


def final_failure(gw: Gateway, knobs: Knobs, group: str) -> float:
    """Probability that a request to `group` still fails after its retries."""
    return gw.group_fail.get(group, 1.0) ** (knobs.groups[group].num_retries + 1)


def exception_class(status: str) -> str:
    names = {"408": "Timeout", "429": "RateLimitError", "503": "ServiceUnavailableError", "400": "BadRequestError"}
    return f"{PROVIDER.capitalize()}.{names.get(status, 'InternalServerError')}"


def remaining(limit: float | None, used_per_minute: float) -> float:
    return UNLIMITED if limit is None else max(0.0, math.floor(limit - used_per_minute))

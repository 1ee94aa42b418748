"""How real clusters differ from the simulator's one way of exposing a fleet, as transforms of its series.

The simulator writes one convention: a 60 s scrape aligned to the minute, node_exporter's
`instance` as `<node>:9100`, kube-state-metrics and dcgm-exporter series without the target labels
a Prometheus Operator ServiceMonitor adds, V1 vLLM names only, and every exporter present. Real
clusters vary on each of these, and a diagnosis must come out the same (or, where an exporter is
missing, unknown, never wrong). Each variation is a small frozen dataclass with a name, applied to
a scenario's simulated series after they are simulated and before they are written, so a run can
say which variations a case had. `draw` picks a mix at random per (run seed, scenario, index).
"""

from __future__ import annotations

import itertools
import math
import random
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from diagnosd.sim import noise
from diagnosd.sim.exposition import Labels
from diagnosd.sim.history import Series

Points = tuple["array[float]", "array[float]"]
# Sample names that are cumulative (counters, histogram parts): never noised or dipped.
CUMULATIVE = ("_total", "_bucket", "_sum", "_count", "_created")
# Exporter (as Missing names it) -> the sample name prefixes it publishes.
EXPORTER_PREFIXES = {"dcgm": ("DCGM_",), "node": ("node_",), "ksm": ("kube_",)}
# vLLM 0.9.2-0.11 exposes the new names and the deprecated ones side by side, same values
# (rules/metrics.yaml has the timeline of each rename).
OLD_VLLM_NAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
    **{
        f"vllm:inter_token_latency_seconds{p}": f"vllm:time_per_output_token_seconds{p}"
        for p in ("_bucket", "_sum", "_count")
    },
}


@dataclass(frozen=True)
class Cluster:
    """What a transform needs to know of the fleet: each node's IP (node_exporter's `instance`)."""

    node_ips: Mapping[str, str] = field(default_factory=dict)


class Variation(Protocol):
    @property
    def name(self) -> str: ...

    def apply(self, series: Series, cluster: Cluster) -> Series: ...


def _map_labels(series: Series, prefixes: tuple[str, ...], change: Callable[[str, Labels], Labels]) -> Series:
    out: Series = {}
    for (name, labels), points in series.items():
        key = (name, change(name, labels) if name.startswith(prefixes) else labels)
        # A relabelling that merges two series keeps the first, as a TSDB would refuse the second.
        out.setdefault(key, points)
    return out


def _with(labels: Labels, **values: str) -> Labels:
    """Labels with `values` set (replacing), sorted like the exposition's."""
    merged = dict(labels)
    merged.update(values)
    return tuple(sorted(merged.items()))


def _suffix(*parts: object) -> str:
    """A DaemonSet pod's random suffix, stable per node: `x7k2p`."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    key = noise.stream(*parts)
    return "".join(alphabet[(key >> (6 * i)) % len(alphabet)] for i in range(5))


@dataclass(frozen=True)
class Missing:
    """An optional exporter not installed: none of its series exist."""

    exporter: Literal["dcgm", "node", "ksm"]

    @property
    def name(self) -> str:
        return f"no-{self.exporter}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        gone = EXPORTER_PREFIXES[self.exporter]
        return {k: v for k, v in series.items() if not k[0].startswith(gone)}


@dataclass(frozen=True)
class NodeExporterLabels:
    """How node_exporter's target is labelled.

    `node_port`: `instance="<node>:9100"` (the simulator's own). `ip_port`: plain `kubernetes_sd`
    pod/endpoints role, `instance="10.0.1.10:9100"` and no node label. `kube_prometheus_stack`:
    the chart's ServiceMonitor relabels `instance` to the node name and adds the exporter pod's
    `namespace`/`pod`/`container`, `service` and `endpoint`.
    """

    style: Literal["node_port", "ip_port", "kube_prometheus_stack"]

    @property
    def name(self) -> str:
        return f"node-exporter={self.style}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        if self.style == "node_port":
            return series

        def change(name: str, labels: Labels) -> Labels:
            d = dict(labels)
            node = d.get("instance", "").rsplit(":", 1)[0]
            if self.style == "ip_port":
                return _with(labels, instance=f"{cluster.node_ips.get(node, node)}:9100")
            return _with(
                labels,
                instance=node,
                job="node-exporter",
                namespace="monitoring",
                pod=f"kube-prometheus-stack-prometheus-node-exporter-{_suffix('node-exporter', node)}",
                container="node-exporter",
                service="kube-prometheus-stack-prometheus-node-exporter",
                endpoint="http-metrics",
            )

        return _map_labels(series, EXPORTER_PREFIXES["node"], change)


def _target(labels: Labels, honor: bool, own: Mapping[str, str]) -> Labels:
    """Prometheus' merge of a target's labels into a sample's: honorLabels keeps the sample's on a
    clash, otherwise the sample's become `exported_<name>` and the target's win."""
    d = dict(labels)
    for key, value in own.items():
        if key in d and d[key] != value:
            if honor:
                continue
            d[f"exported_{key}"] = d[key]
        d[key] = value
    return tuple(sorted(d.items()))


KSM_POD = {
    "namespace": "monitoring",
    "pod": "kube-prometheus-stack-kube-state-metrics-6d4b9c7f8-2xq9z",
    "container": "kube-state-metrics",
    "service": "kube-prometheus-stack-kube-state-metrics",
    "endpoint": "http",
}


@dataclass(frozen=True)
class KsmLabels:
    """kube-state-metrics' target labels: none (`plain`), the chart's ServiceMonitor with
    `honorLabels: true` (object labels stay; series without a pod, node/workload/HPA ones, get
    kube-state-metrics' own pod), or `honor_off` (object labels become `exported_*`)."""

    style: Literal["plain", "kube_prometheus_stack", "honor_off"]

    @property
    def name(self) -> str:
        return f"ksm={self.style}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        if self.style == "plain":
            return series
        honor = self.style == "kube_prometheus_stack"
        return _map_labels(series, EXPORTER_PREFIXES["ksm"], lambda _, labels: _target(labels, honor, KSM_POD))


@dataclass(frozen=True)
class DcgmLabels:
    """dcgm-exporter behind a ServiceMonitor: with `honorLabels: true` the GPU user's
    `namespace`/`pod`/`container` stay; without, they become `exported_*` and the target's are
    the exporter's own DaemonSet pod (one per node)."""

    honor: bool

    @property
    def name(self) -> str:
        return f"dcgm-honor-labels={'on' if self.honor else 'off'}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        def change(name: str, labels: Labels) -> Labels:
            d = dict(labels)
            host = d.get("Hostname") or d.get("hostname") or d.get("instance", "")
            own = {
                "namespace": "gpu-operator",
                "pod": f"nvidia-dcgm-exporter-{_suffix('dcgm-exporter', host)}",
                "container": "nvidia-dcgm-exporter",
                "service": "nvidia-dcgm-exporter",
                "endpoint": "gpu-metrics",
            }
            return _target(labels, self.honor, own)

        return _map_labels(series, EXPORTER_PREFIXES["dcgm"], change)


@dataclass(frozen=True)
class Spelling:
    """Metric names as stored: as exposed, with every engine colon rewritten to an underscore
    (prometheus-client 0.23+ or an OpenTelemetry hop), or vLLM 0.9.2-0.11's old and new names
    side by side."""

    style: Literal["as_exposed", "underscore", "old_and_new"]

    @property
    def name(self) -> str:
        return f"names={self.style}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        if self.style == "as_exposed":
            return series
        if self.style == "underscore":
            return {(_underscored(n), labels): p for (n, labels), p in series.items()}
        out = dict(series)
        present = {n for n, _ in series}
        for (name, labels), (times, values) in series.items():
            colon = name.replace("vllm_", "vllm:", 1) if name.startswith("vllm_") else name
            old = OLD_VLLM_NAMES.get(colon)
            if old is None:
                continue
            old = old if colon == name else old.replace(":", "_", 1)
            if old not in present:  # a V0 engine already exposes the old name alone
                out[(old, labels)] = (array("d", times), array("d", values))
        return out


def _underscored(name: str) -> str:
    return name.replace(":", "_") if name.startswith(("vllm:", "sglang:")) else name


@dataclass(frozen=True)
class Scrape:
    """Another scrape interval, and a target's phase (scrapes are not aligned to the minute).

    The simulator samples every 60 s where the trees look (hourly elsewhere). A 15 s or 30 s scrape
    sees the values in between: counters and histogram buckets move linearly between two samples
    (a decrease, a restart, is not smeared), gauges too. A 60 s scrape keeps the samples. All
    timestamps move `phase` seconds earlier.
    """

    interval: float
    phase: float = 0.0

    @property
    def name(self) -> str:
        return f"scrape={self.interval:g}s" + (f"+{self.phase:g}s" if self.phase else "")

    def apply(self, series: Series, cluster: Cluster) -> Series:
        return {key: self._resampled(key[0], times, values) for key, (times, values) in series.items()}

    def _resampled(self, name: str, times: Sequence[float], values: Sequence[float]) -> Points:
        # A drop in a counter is a restart: hold the old value until it happens, never a ramp down.
        hold = not _is_gauge(name)
        t_out, v_out = array("d"), array("d")
        for i, (t, v) in enumerate(zip(times, values, strict=True)):
            t_out.append(t - self.phase)
            v_out.append(v)
            if i + 1 == len(times) or self.interval >= 60.0:
                continue
            t2, v2 = times[i + 1], values[i + 1]
            if t2 - t != 60.0:
                continue  # only between two scrapes of one dense stretch, never across a gap
            k = 1
            while (dt := k * self.interval) < t2 - t:
                t_out.append(t + dt - self.phase)
                v_out.append(v if hold and v2 < v else v + (v2 - v) * dt / (t2 - t))
                k += 1
        return t_out, v_out


def _is_gauge(name: str) -> bool:
    return not name.endswith(CUMULATIVE) and not name.endswith("_info")


@dataclass(frozen=True)
class Noise:
    """Measurement noise on fractional gauges (utilisation, KV usage): ±level, per sample.
    Integer gauges (states, counts, replicas) and cumulative series stay exact."""

    level: float
    seed: int = 0

    @property
    def name(self) -> str:
        return f"noise={self.level:g}"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        if self.level <= 0:
            return series
        out: Series = {}
        for key, (times, values) in series.items():
            if not _is_gauge(key[0]) or all(float(v).is_integer() or not math.isfinite(v) for v in values):
                out[key] = (times, values)
                continue
            stream = noise.stream(self.seed, "noise", key[0], key[1])
            fraction = all(0.0 <= v <= 1.0 for v in values)
            noisy = array("d")
            for t, v in zip(times, values, strict=True):
                n = v * noise.jitter(stream, t, self.level) if math.isfinite(v) else v
                noisy.append(min(max(n, 0.0), 1.0) if fraction else n)
            out[key] = (times, noisy)
        return out


ENGINE_GAUGES = ("vllm:", "vllm_", "sglang:", "sglang_", "DCGM_")


@dataclass(frozen=True)
class Dips:
    """A gauge of an engine or a GPU that drops for one scrape (a scrape racing a reset, a
    sampling hiccup): about `per_hour` per series, to between 0 and half its value."""

    per_hour: float
    seed: int = 0

    @property
    def name(self) -> str:
        return f"dips={self.per_hour:g}/h"

    def apply(self, series: Series, cluster: Cluster) -> Series:
        if self.per_hour <= 0:
            return series
        out: Series = {}
        for key, (times, values) in series.items():
            if not (key[0].startswith(ENGINE_GAUGES) and _is_gauge(key[0])) or len(times) < 3:
                out[key] = (times, values)
                continue
            stream = noise.stream(self.seed, "dips", key[0], key[1])
            # Each stored sample is one scrape, wherever it lies: the chance that a scrape dips is
            # per_hour × the scrape interval (the closest spacing; history far back is stored
            # sparsely, so a median spacing of an hour would dip every sample of a week-long series).
            spacing = min((b - a for a, b in itertools.pairwise(times) if b > a), default=0.0)
            chance = self.per_hour * spacing / 3600.0
            dipped = array("d", values)
            for i, t in enumerate(times):
                if noise.unit(stream, t) < chance:
                    dipped[i] = values[i] * 0.5 * noise.unit(stream ^ 0xD1B54A32D192ED03, t)
            out[key] = (times, dipped)
        return out


# Applied in this order: what exists, then how it is labelled and named, then when it is sampled.
ORDER = (Missing, KsmLabels, DcgmLabels, NodeExporterLabels, Spelling, Scrape, Noise, Dips)


@dataclass(frozen=True)
class Mix:
    """Several variations of one cluster, applied in ORDER."""

    parts: tuple[Variation, ...]

    @property
    def name(self) -> str:
        return " ".join(p.name for p in self.parts) or "as-simulated"

    @property
    def missing(self) -> str | None:
        return next((p.exporter for p in self.parts if isinstance(p, Missing)), None)

    @property
    def without_missing(self) -> Mix:
        return Mix(tuple(p for p in self.parts if not isinstance(p, Missing)))

    def apply(self, series: Series, cluster: Cluster) -> Series:
        for part in sorted(self.parts, key=lambda p: ORDER.index(type(p))):
            series = part.apply(series, cluster)
        return series


NONE = Mix(())
EXPORTERS: tuple[Literal["dcgm", "node", "ksm"], ...] = ("dcgm", "node", "ksm")


def draw(
    seed: int,
    scenario: str,
    index: int,
    *,
    missing: str | None = "random",
    intervals: Sequence[float] = (15.0, 30.0, 60.0),
) -> Mix:
    """A random mix for (run seed, scenario, index). `missing`: "random" (three cases in five miss
    an exporter), None (every exporter there) or the exporter to leave out. `intervals`: the scrape
    intervals to draw from (a 15 s scrape writes four times the samples of the simulator's 60 s)."""
    rng = random.Random(noise.stream(seed, scenario, index))
    interval = rng.choice(tuple(intervals))
    parts: list[Variation] = [
        KsmLabels(rng.choice(("plain", "kube_prometheus_stack", "honor_off"))),
        DcgmLabels(rng.random() < 0.5),
        NodeExporterLabels(rng.choice(("node_port", "ip_port", "kube_prometheus_stack"))),
        Spelling(rng.choice(("as_exposed", "underscore", "old_and_new"))),
        Scrape(interval, float(rng.randrange(int(interval)))),
        Noise(rng.choice((0.0, 0.02, 0.05)), seed=rng.randrange(1 << 30)),
    ]
    if rng.random() < 0.5:
        parts.append(Dips(rng.choice((0.5, 1.0)), seed=rng.randrange(1 << 30)))
    gone = rng.choice((None, None, *EXPORTERS)) if missing == "random" else missing
    if gone is not None:
        parts.insert(0, Missing(next(e for e in EXPORTERS if e == gone)))
    return Mix(tuple(parts))


def relabel(series: Series, label: str, value: str) -> Series:
    """Every series with `label` set to `value` (the isolation label, one value per case)."""
    return {(name, _with(labels, **{label: value})): p for (name, labels), p in series.items()}

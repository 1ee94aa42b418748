"""Fleets of N engine pods for the benchmarks, from the simulator's history writer.

The simulator's cost grows with every pod it runs (close to a second of CPU per pod for the 26 h
of history the trees read), so a fleet of 1000 is not simulated pod by pod. The shipped
`kv_pool_full` scenario (the healthy fleet of eight pods in four Deployments behind a LiteLLM
gateway, with one pod's KV pool full) is simulated once, with only the metric names and the
moments the trees read (diagnosd/drills/windows.py). Its eight pods come first; every further pod
is a copy of one of its healthy pods under a new identity (pod name, uid, IPs, node, GPU UUIDs,
gateway deployment id), so the fault stays on one pod at every N and only the fleet grows:
each pod with its GPUs (dcgm-exporter), its node (node_exporter, kube-state-metrics) and its
LiteLLM deployment. Series of no pod (model groups, API keys, Deployments, autoscalers) are
written once: the Deployments' replica counts stay those of the scenario.
"""

from __future__ import annotations

import bisect
import hashlib
import pickle
import re
import uuid
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeAlias

from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.drills.verify import keep_for, metric_names
from diagnosd.promlocal import openmetrics
from diagnosd.sim import history, scenario
from diagnosd.sim.exposition import Labels
from diagnosd.sim.fleet import Pod, pod_name, pod_uid
from diagnosd.sim.simulator import Simulator

SCENARIO = "kv_pool_full"
# On the hour, as the drills anchor: the history's dense windows then fall on whole minutes.
ANCHOR = datetime(2026, 11, 20, 15, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Built:
    pods: int
    series: int
    samples: int


@dataclass(frozen=True)
class Template:
    series: history.Series
    pods: list[Pod]
    faulted: frozenset[str]  # pod keys with a fault
    replicas: dict[str, int]  # per Deployment


def simulate(seed: int = 0) -> Template:
    """The template fleet's history: what every fleet size is made from."""
    rules = compose.load()
    trees = list(rules.ruleset.trees.values())
    names = frozenset(set().union(*(metric_names(t, rules) for t in trees)))
    plan = windows.plan(windows.looks(trees))
    loaded = scenario.load(SCENARIO)
    assert loaded.fleet is not None
    # Outside the dense windows only one sample an hour is written (keep_for), so the simulator
    # need not tick more often there: a quarter of the ticks of its default 15 minutes.
    coarse = 3600.0 if plan.history % 3600.0 == 0 else 900.0
    sim = Simulator(loaded, anchor=ANCHOR.timestamp(), seed=seed, history=plan.history, coarse=coarse, looks=plan.dense)
    collected = history.collect(sim, names=names, keep=keep_for(sim.anchor, plan))
    faulted = frozenset(fault.target for fault in loaded.faults)
    return Template(collected, list(sim.layout.pods), faulted, {d.name: d.replicas for d in loaded.fleet.deployments})


def save(template: Template, path: Path) -> None:
    with path.open("wb") as out:
        pickle.dump(template, out, pickle.HIGHEST_PROTOCOL)


def write(pods: int, template: Template | Path, path: Path, span: tuple[float, float] | None = None) -> Built:
    """Write the fleet of `pods` engine pods to `path` (OpenMetrics); with `span`, only the samples
    at [start, end) seconds."""
    if isinstance(template, Path):
        with template.open("rb") as stream:
            template = pickle.load(stream)  # the harness's own file
    assert isinstance(template, Template)
    originals = template.pods
    healthy = [p for p in originals if p.key not in template.faulted]
    owned, shared = _by_pod(template.series, originals)
    cut = _cutter(span)
    out = [openmetrics.Series(name, labels, cut(points)) for (name, labels), points in shared.items()]
    replicas = dict(template.replicas)
    for index in range(pods):
        if index < len(originals):
            out += [openmetrics.Series(n, labels, cut(p)) for (n, labels), p in owned[originals[index].key].items()]
            continue
        source = healthy[(index - len(originals)) % len(healthy)]
        replica = replicas[source.deployment.name]
        replicas[source.deployment.name] += 1
        rename = _renamer(source, _identity(source, index, replica))
        out += [openmetrics.Series(n, rename(labels), cut(p)) for (n, labels), p in owned[source.key].items()]
    with path.open("w", encoding="utf-8") as stream:
        samples = openmetrics.write(stream, out)
    return Built(pods, len(out), samples)


Points: TypeAlias = "tuple[array[float], array[float]]"


def _cutter(span: tuple[float, float] | None) -> Callable[[Points], Iterable[tuple[float, float]]]:
    def cut(points: Points) -> Iterable[tuple[float, float]]:
        times, values = points
        if span is None:
            return zip(times, values, strict=True)
        first, last = bisect.bisect_left(times, span[0]), bisect.bisect_left(times, span[1])
        return zip(times[first:last], values[first:last], strict=True)

    return cut


def _strings(pod: Pod) -> dict[str, str]:
    """What names a pod in label values, by what it is."""
    found = {"name": pod.name, "uid": pod.uid, "ip": pod.ip, "node": pod.node, "node_ip": pod.node_ip}
    found["model_id"] = pod.model_id
    found.update({f"gpu{g.index}": g.uuid for g in pod.gpus})
    return found


def _identity(pod: Pod, index: int, replica: int) -> dict[str, str]:
    """The copy's names, derived from its place as the layout derives a pod's (diagnosd/sim/fleet.py)."""
    name = pod_name(pod.deployment.name, replica, 0)
    node = f"gpu-node-{index + 1:04d}"
    subnet, host = divmod(index, 250)
    found = {"name": name, "uid": pod_uid(name), "ip": f"10.43.{subnet}.{host + 1}", "node": node}
    found["node_ip"] = f"10.1.{subnet}.{host + 1}"
    found["model_id"] = hashlib.sha256(f"deployment/{name}".encode()).hexdigest()
    found.update({f"gpu{g.index}": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{node}/{g.index}')}" for g in pod.gpus})
    return found


def _renamer(pod: Pod, new: dict[str, str]) -> Callable[[Labels], Labels]:
    old = _strings(pod)
    mapping = {old[k]: new[k] for k in old}
    # One pass, longest first: an IP inside an `instance` or a name inside an `api_base` is
    # replaced where it stands, and a replacement is never replaced again.
    pattern = re.compile("|".join(re.escape(s) for s in sorted(mapping, key=len, reverse=True)))

    def rename(labels: Labels) -> Labels:
        return tuple((k, pattern.sub(lambda m: mapping[m.group(0)], v)) for k, v in labels)

    return rename


def _by_pod(series: history.Series, pods: list[Pod]) -> tuple[dict[str, history.Series], history.Series]:
    """Each pod's series (any label value names it), and the series of no pod."""
    owners = [(pod.key, tuple(_strings(pod).values())) for pod in pods]
    owned: dict[str, history.Series] = {pod.key: {} for pod in pods}
    shared: history.Series = {}
    for key, points in series.items():
        values = [v for _, v in key[1]]
        owner = next((k for k, names in owners if any(n in v for n in names for v in values)), None)
        (owned[owner] if owner is not None else shared)[key] = points
    return owned, shared

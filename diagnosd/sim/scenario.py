"""Scenario files (diagnosd/sim/scenarios/*.yaml): a fleet, the faults injected into it, what they cause.

A scenario either describes a whole fleet or `extends` another scenario and adds faults. Fault
times are offsets from the run's anchor (the moment the live series start): `-40m` began forty
minutes before, `+5m` begins five minutes into a live run (fire drills).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import promql_parser as pp
import yaml
from pydantic import Field, ValidationError, model_validator

from diagnosd.errors import Problem, ScenarioError
from diagnosd.sim.spec import (
    DeploymentKnobs,
    EngineKind,
    GpuSpec,
    GroupKnobs,
    KeyKnobs,
    ModelSpec,
    Names,
    PodKnobs,
)
from diagnosd.trees.model import Strict, Text
from diagnosd.trees.yamlfile import read_yaml

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OFFSET = re.compile(r"^[+-]?(\d+(ms|s|m|h|d|w))+$")
TARGET = re.compile(r"^(?P<kind>pod|deployment|served|group|key|model)/(?P<name>[^/]+)(?:/(?P<index>\d+))?$")

Name = Annotated[str, Field(pattern=K8S_NAME, max_length=50)]
Offset = Annotated[str, Field(pattern=OFFSET.pattern)]


class Deployment(Strict):
    name: Name
    model_name: str
    replicas: Annotated[int, Field(ge=1, le=64)] = 2
    engine: EngineKind = "vllm"
    names: Names = "v1"
    # Colon names stored with underscores (prometheus-client 0.23+, reference trap 1).
    underscore: bool = False
    # A pod label the ServiceMonitor copies onto the engine's series (podTargetLabels), e.g. canary.
    track: Name | None = None
    # The decode side of prefill/decode disaggregation (vLLM V1 with the NIXL connector as KV
    # consumer): prompts arrive as KV pulled from prefill instances outside the simulated fleet.
    kv_consumer: bool = False
    # A mixture-of-experts model with expert parallelism over the pod's GPUs; SGLang then reports
    # sglang:eplb_balancedness (its expert-balancedness report mode set to prometheus).
    expert_parallel: bool = False
    gpu: GpuSpec = GpuSpec()
    model: ModelSpec = ModelSpec()
    pod: PodKnobs = PodKnobs()
    autoscaler: DeploymentKnobs | None = None


class Group(GroupKnobs):
    name: str
    deployments: list[Name] = Field(min_length=1)
    fallbacks: list[str] = []


class Key(KeyKnobs):
    alias: Name
    team: Name
    # Model groups this key calls (default: all).
    groups: list[str] | None = None


class Gateway(Strict):
    groups: list[Group] = Field(min_length=1)
    keys: list[Key] = Field(min_length=1)


class Fleet(Strict):
    namespace: Name = "llm-serving"
    deployments: list[Deployment] = Field(min_length=1)
    gateway: Gateway | None = None
    # dcgm-exporter renamed Hostname to hostname in 4.6.0-4.8.3.
    dcgm_hostname_label: Literal["hostname", "Hostname"] = "hostname"
    # Daily swing of all traffic (0 = flat); the peak is an hour before the anchor.
    diurnal: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.3


class Restart(Strict):
    """The engine container dies at the fault's start (and every `every` after), then comes back."""

    reason: str = "Error"
    exit_code: int = 1
    downtime: Offset = "90s"
    every: Offset | None = None


class Replace(Strict):
    """The pod is deleted and a new one takes its place: Pending for `pending`, then loading for `load`.

    `pending: 30d` leaves it unschedulable (no node with a free GPU) for the rest of any run.
    """

    pending: Offset = "5s"
    load: Offset = "180s"


class Fault(Strict):
    target: str = Field(pattern=TARGET.pattern)
    start: Offset
    end: Offset | None = None
    # Numeric changes reach their full size linearly over this long.
    ramp: Offset | None = None
    what: str = Field(min_length=1)
    set: dict[str, Any] = {}
    scale: dict[str, float] = {}
    restart: Restart | None = None
    replace: Replace | None = None

    @model_validator(mode="after")
    def _changes_something(self) -> Fault:
        if not (self.set or self.scale or self.restart or self.replace):
            raise ValueError("a fault needs at least one of set, scale, restart, replace")
        return self


class Expectation(Strict):
    """What the rules must find: `causes` among the root causes of `symptom` on `target`.

    `causes: []`: the symptom shows on the target and no root cause may be named (a benign
    condition the metrics cannot tell from a fault: the manual branches are left to a person).
    """

    symptom: str
    target: str = Field(pattern=TARGET.pattern)
    causes: list[str]
    # Other targets of this symptom must show no symptom (the fault stays where it was put).
    isolated: bool = True
    # Causes the diagnosis must report as fleet-level findings (a check answered without target
    # labels, e.g. idle GPUs anywhere): never a root cause of `target`.
    fleet: list[str] = []


class Scenario(Strict):
    name: Name | None = None
    title: Text
    description: str = ""
    extends: str | None = None
    fleet: Fleet | None = None
    faults: list[Fault] = []
    expect: list[Expectation] = []
    # Every tree not named in `expect` must show no symptom anywhere (as for a scenario that
    # expects nothing): a benign condition that one tree must name and no other may flag.
    quiet_elsewhere: bool = False


def names() -> list[str]:
    """The shipped scenarios, by name."""
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def load(name_or_path: str, *, replicas: int | None = None) -> Scenario:
    """A scenario with `extends` resolved and every target and knob checked; raises ScenarioError."""
    scenario = _resolve(name_or_path, [])
    if scenario.fleet is None:
        raise ScenarioError(name_or_path, [Problem(str(name_or_path), None, "", "no fleet (and nothing to extend)")])
    if replicas is not None:
        fleet = scenario.fleet.model_copy(
            update={"deployments": [d.model_copy(update={"replicas": replicas}) for d in scenario.fleet.deployments]}
        )
        scenario = scenario.model_copy(update={"fleet": fleet})
    problems = check(scenario)
    if problems:
        raise ScenarioError(scenario.name or name_or_path, problems)
    return scenario


def _path(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        return candidate
    return SCENARIOS / f"{name_or_path}.yaml"


def _resolve(name_or_path: str, seen: list[str]) -> Scenario:
    path = _path(name_or_path)
    if str(path) in seen:
        raise ScenarioError(name_or_path, [Problem(str(path), None, "extends", f"cycle: {' -> '.join(seen)}")])
    if not path.is_file():
        known = ", ".join(names())
        raise ScenarioError(name_or_path, [Problem(str(path), None, "", f"no such scenario (known: {known})")])
    scenario = _parse(path)
    if scenario.extends is None:
        return scenario
    base = _resolve(scenario.extends, [*seen, str(path)])
    return scenario.model_copy(
        update={
            "fleet": scenario.fleet or base.fleet,
            "faults": [*base.faults, *scenario.faults],
            "extends": None,
        }
    )


def _parse(path: Path) -> Scenario:
    try:
        located = read_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ScenarioError(path.stem, [Problem(str(path), None, "", f"not YAML: {error}")]) from None
    try:
        scenario = Scenario.model_validate(located.data)
    except ValidationError as error:
        problems = [
            Problem(str(path), located.line(tuple(e["loc"])), ".".join(str(p) for p in e["loc"]), e["msg"])
            for e in error.errors()
        ]
        raise ScenarioError(path.stem, problems) from None
    if scenario.name is not None and scenario.name != path.stem:
        raise ScenarioError(path.stem, [Problem(str(path), None, "name", f"must equal the file name {path.stem!r}")])
    return scenario.model_copy(update={"name": path.stem})


def check(scenario: Scenario) -> list[Problem]:
    """Every fault and expectation names something that exists, with knobs of the right type."""
    assert scenario.fleet is not None
    where = scenario.name or "scenario"
    problems: list[Problem] = []
    for index, fault in enumerate(scenario.faults):
        path = f"faults[{index}]"
        if fault.target.startswith(("served/", "model/")):
            problems.append(Problem(where, None, path, "faults target pod/, deployment/, group/ or key/"))
            continue
        kind, problem = _kind(scenario.fleet, fault.target)
        if problem:
            problems.append(Problem(where, None, path, problem))
            continue
        problems.extend(Problem(where, None, path, p) for p in _knob_problems(kind, fault))
        if (fault.restart or fault.replace) and kind is not PodKnobs:
            problems.append(Problem(where, None, path, "restart and replace apply to pod/<deployment>/<index> only"))
    for index, expectation in enumerate(scenario.expect):
        _, problem = _kind(scenario.fleet, expectation.target)
        if problem:
            problems.append(Problem(where, None, f"expect[{index}]", problem))
    return problems


def _kind(fleet: Fleet, target: str) -> tuple[type[Strict], str | None]:
    match = TARGET.match(target)
    assert match is not None
    kind, name, index = match.group("kind"), match.group("name"), match.group("index")
    deployments = {d.name: d for d in fleet.deployments}
    if kind in ("pod", "deployment", "served"):
        found = deployments.get(name)
        if found is None:
            return PodKnobs, f"{target}: no deployment {name!r} (known: {', '.join(deployments)})"
        if kind == "pod" and (index is None or int(index) >= found.replicas):
            return PodKnobs, f"{target}: pod targets are pod/<deployment>/<index> with index < {found.replicas}"
        return (PodKnobs if kind == "pod" else DeploymentKnobs), None
    gateway = fleet.gateway
    if gateway is None:
        return GroupKnobs, f"{target}: this fleet has no gateway"
    if kind in ("group", "model"):
        groups = [g.name for g in gateway.groups]
        ok = name in groups if kind == "group" else name in {d.model_name.split("/")[-1] for d in fleet.deployments}
        return GroupKnobs, None if ok else f"{target}: unknown {kind} (groups: {', '.join(groups)})"
    keys = [k.alias for k in gateway.keys]
    return KeyKnobs, None if name in keys else f"{target}: no key {name!r} (known: {', '.join(keys)})"


def _knob_problems(kind: type[Strict], fault: Fault) -> list[str]:
    fields = kind.model_fields
    out = [f"unknown knob {k!r} for {fault.target} (known: {', '.join(fields)})" for k in fault.set if k not in fields]
    out += [f"unknown knob {k!r} for {fault.target}" for k in fault.scale if k not in fields]
    for key in fault.scale:
        if key in fields and fields[key].annotation not in (float, int) and "float" not in str(fields[key].annotation):
            out.append(f"scale needs a numeric knob; {key!r} is not")
    if not out:
        try:
            kind.model_validate({**kind().model_dump(), **fault.set})
        except ValidationError as error:
            out += [f"set {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()]
    return out


def seconds(offset: str) -> float:
    """`-40m` -> -2400.0; `+5m` -> 300.0."""
    sign = -1.0 if offset.startswith("-") else 1.0
    parsed = pp.parse_duration(offset.lstrip("+-"))
    return sign * float(parsed.total_seconds())


def with_names(scenario: Scenario, names: str) -> Scenario:
    """Every engine Deployment with other metric names: v1, v0, sglang, or underscore (trap 1)."""
    assert scenario.fleet is not None
    changes: dict[str, object] = {
        "v1": {"names": "v1"},
        "v0": {"names": "v0"},
        "sglang": {"engine": "sglang"},
        "underscore": {"underscore": True},
    }[names]  # type: ignore[assignment]
    deployments = [d.model_copy(update=changes) for d in scenario.fleet.deployments]
    return scenario.model_copy(update={"fleet": scenario.fleet.model_copy(update={"deployments": deployments})})

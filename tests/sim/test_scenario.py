"""Scenario files: every shipped one loads; a broken one is refused with every problem and its line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diagnosd.errors import ScenarioError
from diagnosd.sim import scenario
from diagnosd.sim.fleet import layout


def _write(tmp_path: Path, doc: object, name: str = "broken") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("name", scenario.names())
def test_every_shipped_scenario_loads_and_says_what_it_breaks(name: str) -> None:
    loaded = scenario.load(name)
    assert loaded.name == name
    assert loaded.fleet is not None
    if not name.startswith("healthy"):  # healthy, healthy_pd: base fleets with nothing to find
        assert loaded.faults, "a fault scenario injects something"
        assert loaded.expect, "a fault scenario says what the rules must find"
        assert all(f.what for f in loaded.faults)


def test_every_data_decided_cause_of_the_six_core_trees_has_a_scenario() -> None:
    expected = {(e.symptom, c) for name in scenario.names() for e in scenario.load(name).expect for c in e.causes}
    core = {
        "ttft_high": {"prompt_inflation", "prefix_cache_hit_drop", "prefix_cache_disabled", "system_prompt_dynamic",
                      "gpu_compute_contention", "queueing", "batch_too_large", "long_prompt_blocking"},
        "tpot_high": {"memory_bandwidth_saturated", "batch_too_large", "gpu_clock_throttled", "kv_read_growth"},
        "gpu_underutilized": {"memory_bandwidth_bound", "cpu_bound", "network_bound", "batch_too_small",
                              "kernel_launch_overhead"},
        "memory_high_qps_low": {"max_model_len_too_large", "gpu_memory_utilization_margin", "unused_lora_loaded",
                                "kv_pool_full"},
        "queue_backlog": {"concurrency_slots_full", "kv_pool_full", "long_requests_hogging", "requests_not_released",
                          "autoscaling_lagging"},
        "kv_hit_low": {"dynamic_system_prompt", "prefix_cache_disabled", "radix_eviction_under_load"},
    }  # fmt: skip
    missing = {(s, c) for s, causes in core.items() for c in causes} - expected
    assert not missing


def test_pods_are_named_like_deployment_pods() -> None:
    pods = layout(scenario.load("healthy").fleet).pods  # type: ignore[arg-type]
    import re

    assert all(re.fullmatch(rf"{p.deployment.name}-[a-z0-9]{{10}}-[a-z0-9]{{5}}", p.name) for p in pods)
    assert len({p.name for p in pods}) == len(pods)


def test_unknown_scenario_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError, match="healthy"):
        scenario.load("no_such_scenario")


def test_every_problem_is_reported_with_its_place(tmp_path: Path) -> None:
    doc = {
        "extends": "healthy",
        "title": {"en": "x", "zh": "x"},
        "faults": [
            {"target": "pod/vllm-llama-8b/9", "start": "-10m", "what": "x", "set": {"prompt_tokens": 1}},
            {"target": "pod/vllm-llama-8b/0", "start": "-10m", "what": "x", "set": {"no_such_knob": 1}},
            {"target": "group/llama-8b", "start": "-10m", "what": "x", "set": {"rps": "many"}},
            {"target": "key/chat-frontend", "start": "-10m", "what": "x", "restart": {}},
        ],
        "expect": [{"symptom": "ttft_high", "target": "group/nope", "causes": ["queueing"]}],
    }
    with pytest.raises(ScenarioError) as caught:
        scenario.load(_write(tmp_path, doc))
    text = str(caught.value)
    assert "faults[0]" in text
    assert "index < 3" in text
    assert "no_such_knob" in text
    assert "set rps" in text
    assert "restart and replace apply to pod" in text
    assert "expect[0]" in text
    assert "group/nope" in text


def test_yaml_errors_point_at_the_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario.load(
            _write(tmp_path, "title: {en: x, zh: x}\nextends: healthy\nfaults:\n  - target: pod/x\n    start: soon\n")
        )
    assert ":5:" in str(caught.value) or ":4:" in str(caught.value)


def test_extends_cycle_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, {"title": {"en": "a", "zh": "a"}, "extends": str(tmp_path / "b.yaml")}, "a")
    _write(tmp_path, {"title": {"en": "b", "zh": "b"}, "extends": str(tmp_path / "a.yaml")}, "b")
    with pytest.raises(ScenarioError, match="cycle"):
        scenario.load(str(tmp_path / "a.yaml"))


def test_name_flavours_and_replicas_change_the_fleet() -> None:
    base = scenario.load("healthy", replicas=1)
    assert base.fleet is not None
    assert all(d.replicas == 1 for d in base.fleet.deployments)
    for names, check in (
        ("v0", lambda d: d.names == "v0"),
        ("sglang", lambda d: d.engine == "sglang"),
        ("underscore", lambda d: d.underscore),
    ):
        changed = scenario.with_names(base, names)
        assert changed.fleet is not None
        assert all(check(d) for d in changed.fleet.deployments)


def test_replicas_below_a_faults_index_are_refused() -> None:
    with pytest.raises(ScenarioError, match="index < 1"):
        scenario.load("prompt_inflation", replicas=1)

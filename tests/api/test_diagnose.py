"""GET /diagnose/{symptom} against a real Prometheus holding backfilled history, and its refusals."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diagnosd.api.schemas import DiagnosisOut
from tests.serving import AT, RULES, build, serve, settings


@pytest.fixture
def prometheus_url(fleet_url: str) -> str:
    return fleet_url


async def test_diagnose_finds_the_full_kv_pool_on_the_faulty_pod(prometheus_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params={"namespace": "prod", "at": AT.isoformat()})
    assert response.status_code == 200
    body = response.json()
    targets = {t["labels"]["pod"]: t for t in body["targets"]}
    assert sorted(targets) == ["vllm-0", "vllm-1", "vllm-2"]
    faulty = targets["vllm-0"]
    assert faulty["symptom_present"] is True
    assert [c["cause"] for c in faulty["root_causes"]] == ["kv_pool_full"]
    evidence = faulty["root_causes"][0]["evidence"][0]
    assert evidence["value"] == pytest.approx(0.95)
    assert evidence["threshold"] == pytest.approx(0.9)
    assert targets["vllm-1"]["symptom_present"] is False
    assert targets["vllm-1"]["root_causes"] == []
    assert targets["vllm-2"]["symptom_present"] is True
    assert targets["vllm-2"]["root_causes"] == []
    assert body["evaluated_at"] == "2026-01-02T01:00:00Z"
    DiagnosisOut.model_validate(body)  # the documented wire model is exactly what is sent (extra=forbid)


async def test_scope_narrows_to_one_pod_and_text_shows_the_tree(prometheus_url: str, tmp_path: Path) -> None:
    params = {"namespace": "prod", "pod": "vllm-0", "at": str(AT.timestamp()), "format": "text", "lang": "zh"}
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params=params)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "namespace=prod pod=vllm-0 — 症状存在" in text
    assert "vllm-1" not in text
    assert "▲ 检查 KV Cache 使用率" in text
    assert "1. kv_pool_full [严重程度：警告] KV 池子快满" in text


async def test_fleet_text_collapses_clear_targets_unless_verbose(prometheus_url: str, tmp_path: Path) -> None:
    params = {"namespace": "prod", "at": str(AT.timestamp()), "format": "text"}
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        brief = (await client.get("/diagnose/queue_backlog", params=params)).text
        full = (await client.get("/diagnose/queue_backlog", params={**params, "verbose": "true"})).text
    assert "2 of 3 targets have the symptom, 1 does not, 0 unknown" in brief
    assert "  · namespace=prod pod=vllm-1  " in brief  # one line, with the detect's value
    assert "namespace=prod pod=vllm-1 — symptom not present" not in brief
    assert "namespace=prod pod=vllm-1 — symptom not present" in full  # verbose is no scope label


async def test_match_parameter_scopes_a_label_named_like_a_reserved_word(prometheus_url: str, tmp_path: Path) -> None:
    params: list[tuple[str, str | int | float | bool | None]] = [("match", "pod=vllm-2"), ("at", AT.isoformat())]
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params=params)
    assert response.status_code == 200
    assert [t["labels"]["pod"] for t in response.json()["targets"]] == ["vllm-2"]
    assert response.json()["scope"] == {"pod": "vllm-2"}


HOSTILE = [
    'vllm-0"} or vector(1) #',
    "vllm-0\\",
    'a"b',
    "line\nbreak",
    "}{",
    ".*",
    "vllm-.*",
    "😀 ünïcode",
    "",
]


@pytest.mark.parametrize("value", HOSTILE)
async def test_hostile_label_values_are_literal_matchers(prometheus_url: str, tmp_path: Path, value: str) -> None:
    """Nothing a user types reaches PromQL as syntax: no pod has these names, so no target matches."""
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, services):
        response = await client.get("/diagnose/queue_backlog", params={"pod": value, "at": AT.isoformat()})
        errors = next(iter(services.metrics.query_errors.collect())).samples
    assert response.status_code == 200, response.text
    assert response.json()["targets"] == []
    assert response.json()["scope"] == {"pod": value}
    assert errors == []


@pytest.mark.parametrize(
    ("params", "label"),
    [
        ({"bad-label": "x"}, "bad-label"),
        ({"__name__": "up"}, "__name__"),
        ({"0pod": "x"}, "0pod"),
        ([("pod", "a"), ("pod", "b")], "pod"),
        ({"match": "no-equals-sign"}, "no-equals-sign"),
        ({"pod": "x" * 2000}, "pod"),
    ],
)
async def test_bad_labels_are_400_with_the_label_named(
    prometheus_url: str, tmp_path: Path, params: object, label: str
) -> None:
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params=params)  # type: ignore[arg-type]
        assert (await client.get("/healthz")).status_code == 200
    assert response.status_code == 400
    assert response.json()["error"] == "bad_scope"
    assert response.json()["label"] == label


async def test_unknown_symptom_is_404_listing_the_known_ones(prometheus_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/ttft_hgih")
    assert response.status_code == 404
    assert response.json()["error"] == "unknown_symptom"
    assert response.json()["known"] == ["queue_backlog", "kv_hit_low"]
    assert "ttft_hgih" in response.json()["message"]


@pytest.mark.parametrize(("params", "name"), [({"at": "yesterday"}, "at"), ({"at": "nan"}, "at")])
async def test_bad_time_is_400(prometheus_url: str, tmp_path: Path, params: dict[str, str], name: str) -> None:
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params=params)
    assert response.status_code == 400
    assert response.json()["parameter"] == name


async def test_bad_format_is_422(prometheus_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params={"format": "xml"})
    assert response.status_code == 422
    assert response.json()["problems"][0]["loc"] == ["query", "format"]


async def test_the_daemon_reads_the_canary_convention_from_its_settings(prometheus_url: str, tmp_path: Path) -> None:
    """topology.canary_pod_pattern reaches the rules' `@stable` recipe: the pod it names drops out."""
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    tree = rules / "kv_hit_low.yaml"
    tree.write_text(
        tree.read_text().replace("(vllm:gpu_prefix_cache_hit_rate)", "(vllm:gpu_prefix_cache_hit_rate{@stable})")
    )
    params = {"namespace": "prod", "at": AT.isoformat()}

    async def pods(**sections: object) -> dict[str, bool | None]:
        async with serve(build(settings(prometheus_url, tmp_path, rules_dir=str(rules), **sections))) as (client, _):
            body = (await client.get("/diagnose/kv_hit_low", params=params)).json()
        return {t["labels"]["pod"]: t["symptom_present"] for t in body["targets"]}

    assert (await pods())["vllm-1"] is True  # default convention: track="canary", which no pod carries
    assert "vllm-1" not in await pods(topology={"canary_pod_pattern": "vllm-1"})


async def test_a_fleet_level_cause_is_tracked_exported_and_listed_once(prometheus_url: str, tmp_path: Path) -> None:
    """A check answered without target labels becomes one `level="fleet"` finding, not one per pod."""
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    tree = rules / "kv_hit_low.yaml"
    tree.write_text(
        tree.read_text().replace("max by ($target) (vllm:prefix_caching_disabled)", "max(vllm:prefix_caching_disabled)")
    )
    async with serve(build(settings(prometheus_url, tmp_path, rules_dir=str(rules)))) as (client, services):
        await services.scheduler.run_round()
        findings = (await client.get("/findings")).json()["findings"]
        metrics = (await client.get("/metrics")).text
    fleet = [f for f in findings if f["symptom"] == "kv_hit_low"]
    assert [(f["cause"], f["labels"], f["state"]) for f in fleet] == [
        ("prefix_cache_disabled", {"level": "fleet"}, "firing")
    ]
    assert 'diagnosd_root_cause{cause="prefix_cache_disabled",level="fleet"' in metrics


async def test_without_at_the_daemon_diagnoses_at_its_own_clock(prometheus_url: str, tmp_path: Path) -> None:
    """The engine asks the injected clock for "now": the history's hour, not the wall clock's."""
    async with serve(build(settings(prometheus_url, tmp_path))) as (client, _):  # clock: AT
        body = (await client.get("/diagnose/queue_backlog", params={"namespace": "prod"})).json()
    assert body["evaluated_at"] == "2026-01-02T01:00:00Z"
    assert {t["labels"]["pod"]: t["symptom_present"] for t in body["targets"]}["vllm-0"] is True

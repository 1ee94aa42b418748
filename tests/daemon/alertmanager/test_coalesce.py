"""Coalescing units: which batch an alert joins, and each alert's part (the scope covering a batch:
tests/engine/test_scope.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from diagnosd.daemon.alertmanager.coalesce import batch_key, part, window_start
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.findings.model import Verdict
from tests.findings.builders import clear, diagnosis, fleetwide, holding

AT = datetime(2026, 11, 29, 14, 30, 1, 500000, tzinfo=UTC)
WINDOW = timedelta(seconds=2)


def job(pod: str, symptom: str = "queue_backlog", at: datetime = AT, **labels: str) -> AlertJob:
    return AlertJob(
        fingerprint=f"fp-{pod}",
        status="firing",
        starts_at="2026-11-29T14:00:00+00:00",
        alertname="VLLMQueueBacklog",
        symptom=symptom,
        scope={"namespace": "prod", "pod": pod, **labels},
        received_at=at,
    )


def test_the_window_is_aligned_on_the_epoch() -> None:
    assert window_start(AT, WINDOW) == datetime(2026, 11, 29, 14, 30, 0, tzinfo=UTC)
    assert window_start(AT + timedelta(seconds=0.5), WINDOW) == datetime(2026, 11, 29, 14, 30, 2, tzinfo=UTC)
    assert window_start(AT, timedelta(minutes=1)) == datetime(2026, 11, 29, 14, 30, tzinfo=UTC)


TARGET = ("namespace", "pod")


def test_one_batch_per_symptom_window_and_label_that_is_not_a_target_label() -> None:
    same = {batch_key(job(pod), WINDOW, (), TARGET) for pod in ("vllm-0", "vllm-1", "vllm-2")}
    assert len(same) == 1
    assert batch_key(job("vllm-0", symptom="kv_hit_low"), WINDOW, (), TARGET) not in same
    assert batch_key(job("vllm-0", at=AT + WINDOW), WINDOW, (), TARGET) not in same
    # model_name narrows a pod's own series (a pod serving two models): alerts on another model,
    # or on none, are another batch; alerts on the same model one batch.
    llama = {batch_key(job(pod, model_name="llama"), WINDOW, (), TARGET) for pod in ("vllm-0", "vllm-1")}
    assert len(llama) == 1
    assert llama.isdisjoint(same)
    assert batch_key(job("vllm-0", model_name="mistral"), WINDOW, (), TARGET) not in llama
    east = batch_key(job("vllm-0", cluster="east"), WINDOW, ("cluster",), TARGET)
    west = batch_key(job("vllm-1", cluster="west"), WINDOW, ("cluster",), TARGET)
    assert east != west
    assert east == batch_key(job("vllm-2", cluster="east"), WINDOW, ("cluster",), TARGET)
    # A strict label splits batches even where it is a target label.
    assert batch_key(job("vllm-0"), WINDOW, ("pod",), TARGET) != batch_key(job("vllm-1"), WINDOW, ("pod",), TARGET)


def test_a_zero_window_gives_each_alert_state_its_own_batch() -> None:
    keys = {batch_key(job(pod), timedelta(0), (), TARGET) for pod in ("vllm-0", "vllm-1")}
    assert len(keys) == 2


def test_each_alert_takes_the_targets_its_scope_names() -> None:
    wide = diagnosis(holding("vllm-0"), clear("vllm-1"), holding("vllm-2"), scope={"namespace": "prod"})
    mine = part(wide, {"namespace": "prod", "pod": "vllm-2", "model_name": "llama"})
    assert [t.labels["pod"] for t in mine.targets] == ["vllm-2"]
    assert mine.scope == {"namespace": "prod", "pod": "vllm-2", "model_name": "llama"}
    assert (mine.symptom, mine.evaluated_at, mine.queries) == (wide.symptom, wide.evaluated_at, wide.queries)
    # A scope naming a whole namespace takes every target in it, none of another.
    assert len(part(wide, {"namespace": "prod"}).targets) == 3
    assert part(wide, {"namespace": "staging"}).targets == ()
    assert part(wide, {"namespace": "prod", "pod": "vllm-9"}).targets == ()


def test_fleet_level_results_go_with_every_part() -> None:
    wide = fleetwide(True, Verdict.MATCHED, scope={"namespace": "prod"})
    assert part(wide, {"namespace": "prod", "pod": "vllm-0"}).fleet == wide.fleet

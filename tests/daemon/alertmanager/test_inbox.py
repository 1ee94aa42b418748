"""The inbox with a real store and tracker and a stand-in diagnoser that counts its evaluations:
storms coalesced into one evaluation per symptom and window, each alert its own record and finding
link, failures retried per alert, the bound counting jobs, and resolutions never waiting.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon.alertmanager.inbox import RECORD_SLICE, REFRESH, Delivery, Inbox
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosisProcessLost, QueueFull, SourceUnavailable, StoreError
from diagnosd.findings.model import Diagnosis
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics
from diagnosd.storage import open_database
from tests.findings.builders import clear, diagnosis, holding

AT = datetime(2026, 11, 29, 14, 30, 0, 500000, tzinfo=UTC)
WINDOW = timedelta(milliseconds=50)


@dataclass
class Looked:
    diagnosis: Diagnosis


@dataclass
class CountingDiagnoser:
    """Answers every pod it is asked about (vllm-N holds kv_pool_full for even N), counting calls."""

    fail: bool = False
    # Raised instead of answering, when set (fail raises a Prometheus outage).
    error: Exception | None = None
    release: asyncio.Event | None = None
    calls: list[tuple[str, Scope, datetime]] = field(default_factory=list)

    def tree(self, symptom: str) -> Any:
        return SimpleNamespace(id=symptom, target=["namespace", "pod"])

    async def diagnose(self, tree: Any, scope: Scope, at: datetime | None, trigger: Any) -> Looked:
        assert at is not None
        self.calls.append((tree.id, scope, at))
        if self.release is not None:
            await self.release.wait()
        if self.fail:
            raise SourceUnavailable("connection refused", url="http://127.0.0.1:9")
        if self.error is not None:
            raise self.error
        targets = [(holding if n % 2 == 0 else clear)(f"vllm-{n}") for n in range(40)]
        wanted = dict(scope.values())
        inside = [t for t in targets if all(t.labels.get(k, v[0]) in v for k, v in wanted.items())]
        return Looked(diagnosis(*inside, symptom=tree.id, scope=scope.as_dict()))


@dataclass
class Rig:
    inbox: Inbox
    store: DeliveryMemory
    tracker: Tracker
    diagnoser: CountingDiagnoser
    clock: list[datetime]  # what the inbox reads as now: a test moves it


def job(n: int, symptom: str = "queue_backlog", status: str = "firing") -> AlertJob:
    return AlertJob(
        fingerprint=f"fp-{symptom}-{n}",
        status=status,
        starts_at="2026-11-29T14:00:00+00:00",
        alertname="VLLMQueueBacklog",
        symptom=symptom,
        scope={"namespace": "prod", "pod": f"vllm-{n}", "model_name": "llama"},
        received_at=AT,
    )


@pytest.fixture
async def rig(database_location: Path | str, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    # A copy: the same param serves every backend, and the options are popped.
    options: dict[str, Any] = dict(getattr(request, "param", {}))
    database = open_database(database_location)
    memory = DeliveryMemory(database)
    tracker = Tracker(Store(database))
    diagnoser = CountingDiagnoser(**options.pop("diagnoser", {}))
    clock = [AT]
    inbox = Inbox(
        memory,
        tracker,
        diagnoser,  # type: ignore[arg-type]
        Metrics(CollectorRegistry()),
        lambda: clock[0],
        capacity=options.pop("capacity", 256),
        workers=2,
        max_attempts=5,
        retry_after=options.pop("retry_after", timedelta(seconds=30)),
        coalesce_window=options.pop("window", WINDOW),
    )
    if options.pop("start", True):
        await inbox.start()
    try:
        yield Rig(inbox, memory, tracker, diagnoser, clock)
    finally:
        await inbox.stop()
        database.close()


def outcomes(store: DeliveryMemory, jobs: Sequence[AlertJob]) -> set[str | None]:
    return {record.outcome if (record := store.alert(j.key)) else None for j in jobs}


async def test_a_storm_of_two_symptoms_costs_two_evaluations(rig: Rig) -> None:
    storm = [job(n) for n in range(30)] + [job(n, "kv_hit_low") for n in range(10)]
    for start in range(0, len(storm), 7):  # many deliveries within one window
        rig.inbox.offer(storm[start : start + 7])
    await rig.inbox.join()
    assert sorted((symptom, scope.as_dict()) for symptom, scope, _ in rig.diagnoser.calls) == [
        ("kv_hit_low", {"model_name": "llama", "namespace": "prod"}),
        ("queue_backlog", {"model_name": "llama", "namespace": "prod"}),
    ]
    # Each evaluation is scoped to its alerts' pods, not to the namespace they share.
    assert sorted((symptom, scope.choices) for symptom, scope, _ in rig.diagnoser.calls) == [
        ("kv_hit_low", (("pod", tuple(sorted(f"vllm-{n}" for n in range(10)))),)),
        ("queue_backlog", (("pod", tuple(sorted(f"vllm-{n}" for n in range(30)))),)),
    ]
    assert outcomes(rig.store, storm) == {Delivery.DONE}
    # Each alert links the finding on its own pod, and only there.
    by_pod = {(f.symptom, f.labels["pod"]): f.alerts for f in rig.tracker.active()}
    assert by_pod == {
        (j.symptom, j.scope["pod"]): (j.fingerprint,) for j in storm if int(j.scope["pod"].split("-")[1]) % 2 == 0
    }


@pytest.mark.parametrize("rig", [{"window": timedelta(0)}], indirect=True)
async def test_a_zero_window_diagnoses_each_alert_on_its_own(rig: Rig) -> None:
    storm = [job(n) for n in range(6)]
    rig.inbox.offer(storm)
    await rig.inbox.join()
    assert sorted(scope.as_dict()["pod"] for _, scope, _ in rig.diagnoser.calls) == [f"vllm-{n}" for n in range(6)]
    assert outcomes(rig.store, storm) == {Delivery.DONE}


async def test_the_next_window_is_another_evaluation_and_duplicates_none(rig: Rig) -> None:
    first = [job(n) for n in range(4)]
    rig.inbox.offer(first)
    await rig.inbox.join()
    offered = rig.inbox.offer([*first, job(4)])  # re-sends and one new alert, a window later
    await rig.inbox.join()
    assert (len(offered.queued), len(offered.duplicates)) == (1, 4)
    assert len(rig.diagnoser.calls) == 2
    assert rig.diagnoser.calls[1][1].as_dict()["pod"] == "vllm-4"


async def test_a_resend_is_written_only_once_its_memory_is_old(rig: Rig) -> None:
    storm = [job(n) for n in range(3)]
    rig.inbox.offer(storm)
    assert rig.inbox.offer(storm).duplicates == tuple(storm)  # in flight: its mark will write it
    await rig.inbox.join()

    def written() -> set[datetime]:
        return {record.updated_at for record in rig.store.alerts(j.key for j in storm).values()}

    assert written() == {AT}
    rig.clock[0] = AT + REFRESH - timedelta(seconds=1)
    assert rig.inbox.offer(storm).duplicates == tuple(storm)
    assert written() == {AT}  # remembered lately: a lookup, no write
    rig.clock[0] = AT + REFRESH
    assert rig.inbox.offer(storm).duplicates == tuple(storm)
    assert written() == {AT + REFRESH}  # kept from the retention for another while
    assert len(rig.diagnoser.calls) == 1


async def test_a_resend_of_a_settled_state_is_known_without_a_lookup(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    storm = [job(n) for n in range(3)]
    rig.inbox.offer(storm)
    await rig.inbox.join()
    looked: list[tuple[str, str, str]] = []
    lookup = rig.store.alerts

    def counted(keys: Any) -> Any:
        keys = list(keys)
        looked.extend(keys)
        return lookup(keys)

    monkeypatch.setattr(rig.store, "alerts", counted)
    assert rig.inbox.offer(storm).duplicates == tuple(storm)  # looked up once: found done
    assert looked == [j.key for j in storm]
    for _ in range(3):
        assert rig.inbox.offer(storm).duplicates == tuple(storm)
    assert len(looked) == 3  # then known: no lookup, no write
    rig.clock[0] = AT + REFRESH
    assert rig.inbox.offer(storm).duplicates == tuple(storm)
    assert len(looked) == 6  # a refresh later: looked up and written again
    assert {r.updated_at for r in rig.store.alerts(j.key for j in storm).values()} == {AT + REFRESH}
    assert len(rig.diagnoser.calls) == 1


@pytest.mark.parametrize("rig", [{"diagnoser": {"fail": True}}], indirect=True)
async def test_a_failed_state_is_looked_up_at_every_resend_and_retried(rig: Rig) -> None:
    storm = [job(n) for n in range(2)]
    rig.inbox.offer(storm)
    await rig.inbox.join()
    assert outcomes(rig.store, storm) == {Delivery.FAILED}
    for attempt in range(2, 4):
        assert len(rig.inbox.offer(storm).queued) == 2  # never taken for settled
        await rig.inbox.join()
        assert len(rig.diagnoser.calls) == attempt


@pytest.mark.parametrize("rig", [{"diagnoser": {"fail": True}}], indirect=True)
async def test_a_failed_evaluation_fails_every_alert_of_the_batch_for_a_retry(rig: Rig) -> None:
    storm = [job(n) for n in range(5)]
    rig.inbox.offer(storm)
    await rig.inbox.join()
    assert len(rig.diagnoser.calls) == 1
    assert outcomes(rig.store, storm) == {Delivery.FAILED}
    assert rig.tracker.active() == []
    rig.diagnoser.fail = False
    again = rig.inbox.offer(storm)  # a failed state is taken again when it is re-sent
    await rig.inbox.join()
    assert len(again.queued) == 5
    assert len(rig.diagnoser.calls) == 2
    assert outcomes(rig.store, storm) == {Delivery.DONE}


async def test_a_batch_whose_diagnosis_process_died_is_failed_for_a_retry(rig: Rig) -> None:
    rig.diagnoser.error = DiagnosisProcessLost("queue_backlog", "terminated abruptly")
    storm = [job(n) for n in range(5)]
    rig.inbox.offer(storm)
    await rig.inbox.join()
    assert outcomes(rig.store, storm) == {Delivery.FAILED}
    errors = {record.error for j in storm if (record := rig.store.alert(j.key))}
    assert errors == {"the diagnosis process died while diagnosing queue_backlog (terminated abruptly); retried later"}
    rig.diagnoser.error = None
    rig.inbox.offer(storm)  # re-sent: taken again, and diagnosed this time
    await rig.inbox.join()
    assert outcomes(rig.store, storm) == {Delivery.DONE}


@pytest.mark.parametrize(
    "rig", [{"diagnoser": {"fail": True}, "retry_after": timedelta(milliseconds=100)}], indirect=True
)
async def test_a_failure_the_store_cannot_record_keeps_the_worker_and_the_alerts(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prometheus and the store down at once: the batch's failure cannot be written. Formerly the
    # error escaped the worker, which ended (every later alert waited for the other worker, then
    # for none), and the states stayed queued under a lease this replica kept renewing: never retried.
    storm = [job(n) for n in range(3)]
    marked = rig.store.mark_all

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("findings.db", "disk I/O error")

    monkeypatch.setattr(rig.store, "mark_all", down)
    rig.inbox.offer(storm)
    await rig.inbox.join()
    assert len(rig.diagnoser.calls) == 1
    # Both workers still take work: two more batches (two symptoms) are both evaluated.
    rig.inbox.offer([job(10, "kv_hit_low"), job(11, "ttft_high")])
    await rig.inbox.join()
    assert {"kv_hit_low", "ttft_high"} <= {c[0] for c in rig.diagnoser.calls}
    monkeypatch.setattr(rig.store, "mark_all", marked)
    rig.diagnoser.fail = False
    for _ in range(100):  # the storm comes back every retry_after, and is now recorded
        if outcomes(rig.store, storm) == {Delivery.DONE}:
            break
        await asyncio.sleep(0.05)
    assert outcomes(rig.store, storm) == {Delivery.DONE}
    assert rig.diagnoser.calls[-1][0] == "queue_backlog"


@pytest.mark.parametrize("rig", [{"capacity": 2, "start": False, "window": timedelta(0)}], indirect=True)
async def test_the_bound_counts_jobs_and_a_delivery_bigger_than_it_is_taken_whole(rig: Rig) -> None:
    big = [job(n) for n in range(300)]
    taken = rig.inbox.offer(big)  # more alerts than the bound, one delivery: accepted
    assert len(taken.queued) == 300
    assert outcomes(rig.store, big) == {Delivery.QUEUED}
    with pytest.raises(QueueFull) as refused:
        rig.inbox.offer([job(0, "kv_hit_low")])
    assert (refused.value.capacity, refused.value.needed) == (2, 1)
    assert rig.store.alert(job(0, "kv_hit_low").key) is None  # refused: nothing recorded
    assert rig.inbox.offer(big[:3]).duplicates == tuple(big[:3])  # re-sends are never refused
    await rig.inbox.start()
    await rig.inbox.join()
    assert outcomes(rig.store, big) == {Delivery.DONE}
    assert len(rig.inbox.offer([job(0, "kv_hit_low")]).queued) == 1  # drained: taken again


@pytest.mark.parametrize("rig", [{"capacity": 1, "start": False}], indirect=True)
async def test_a_coalesced_storm_is_one_job_of_the_bound(rig: Rig) -> None:
    for start in range(0, 300, 50):
        assert len(rig.inbox.offer([job(n) for n in range(start, start + 50)]).queued) == 50
    assert rig.inbox.waiting == 1
    await rig.inbox.start()
    await rig.inbox.join()
    assert len(rig.diagnoser.calls) == 1


async def test_a_resolution_within_the_window_cancels_that_alert_s_diagnosis(rig: Rig) -> None:
    firing = [job(n) for n in range(3)]
    rig.inbox.offer(firing)
    rig.inbox.offer([job(2, status="resolved")])
    await rig.inbox.join()
    assert len(rig.diagnoser.calls) == 1
    assert [rig.store.alert(j.key).outcome for j in firing] == [  # type: ignore[union-attr]
        Delivery.DONE,
        Delivery.DONE,
        Delivery.SUPERSEDED,
    ]
    assert rig.store.alert(job(2, status="resolved").key).outcome == Delivery.DONE  # type: ignore[union-attr]
    # vllm-2 holds kv_pool_full too, but its alert had resolved before the diagnosis: no finding.
    assert [f.labels["pod"] for f in rig.tracker.active()] == ["vllm-0"]


@pytest.mark.parametrize("rig", [{"start": False}], indirect=True)
async def test_a_coalesced_storm_is_recorded_a_transaction_per_slice_each_alert_under_its_own_claim(rig: Rig) -> None:
    storm = [job(n) for n in range(150)]  # more alerts than one statement names, and than a slice
    rig.inbox.offer(storm)
    # Another replica resolved three before this one got to them: they are no longer held here.
    taken_away = [storm[4], storm[10], storm[120]]
    for j in taken_away:
        assert rig.store.supersede(j.key, AT, Delivery.SUPERSEDED, [Delivery.QUEUED])
    turns = "SELECT taken FROM turns WHERE name = 'findings'"
    [(before,)] = rig.store.database.rows(turns)
    await rig.inbox.start()
    await rig.inbox.join()
    # 147 alerts still held: one transaction per slice of RECORD_SLICE, not one per alert.
    assert rig.store.database.rows(turns) == [(before + math.ceil(147 / RECORD_SLICE),)]
    assert RECORD_SLICE < 147
    assert len(rig.diagnoser.calls) == 1
    assert {j.key: rig.store.alert(j.key).outcome for j in storm} == {  # type: ignore[union-attr]
        j.key: Delivery.SUPERSEDED if j in taken_away else Delivery.DONE for j in storm
    }
    # The diagnoser answers for vllm-0..39 (even ones hold): each alert links its own pod's finding.
    linked = {f.labels["pod"]: f.alerts for f in rig.tracker.active()}
    assert linked == {f"vllm-{n}": (f"fp-queue_backlog-{n}",) for n in range(0, 40, 2) if n not in (4, 10)}

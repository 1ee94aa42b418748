"""The findings store on each backend (SQLite, PostgreSQL): findings with their whole evidence, target
states, filters, retention, and clear errors for a file or a row it cannot use. Restarts are new
Store objects on one database. (The databases themselves are tests/storage, the delivery memory
tests/daemon/alertmanager.)
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.errors import StoreError
from diagnosd.findings.fingerprint import fingerprint
from diagnosd.findings.lifecycle import Finding, Phase, ResolvedBy, State, Trigger
from diagnosd.findings.model import Evidence
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.target import TargetState
from tests.findings.builders import AT, cause


def finding(
    pod: str = "vllm-0", state: State = State.FIRING, cause_id: str = "kv_pool_full", **extra: object
) -> Finding:
    labels = {"namespace": "prod", "pod": pod}
    phase = Phase(
        state,
        AT,
        AT if state is not State.PENDING else None,
        AT + timedelta(minutes=5) if state is State.RESOLVED else None,
    )
    base = Finding(
        fingerprint=fingerprint("queue_backlog", cause_id, labels),
        symptom="queue_backlog",
        cause=cause_id,
        labels=labels,
        phase=phase,
        last_seen=AT,
        trigger=Trigger.ROUND,
        root_cause=cause(cause_id),
        evaluated_at=AT,
    )
    return replace(base, **extra)  # type: ignore[arg-type]


@pytest.fixture
def store(database_location: Path | str) -> Iterator[Store]:
    opened = Store.open(database_location)
    yield opened
    opened.close()


def test_a_restart_keeps_everything(database_location: Path | str) -> None:
    first = Store.open(database_location)
    f = finding(alerts=("0d6ac019b0dad439",))
    first.save([f])
    first.save_states(
        [
            TargetState(
                "queue_backlog", {"namespace": "prod", "pod": "vllm-0"}, True, {"detect": 20.0}, AT, Trigger.ALERT
            )
        ]
    )
    first.close()
    again = Store.open(database_location)
    assert again.active() == [f]
    [state] = again.states()
    assert (state.present, dict(state.values), state.trigger) == (True, {"detect": 20.0}, Trigger.ALERT)
    again.close()


def test_saving_an_episode_again_replaces_it(store: Store) -> None:
    f = finding(state=State.PENDING)
    store.save([f])
    fired = replace(f, phase=Phase(State.FIRING, AT, AT + timedelta(minutes=1)), last_seen=AT + timedelta(minutes=1))
    store.save([fired])
    assert store.episodes(f.fingerprint) == [fired]
    store.save_states([TargetState("queue_backlog", {"pod": "x"}, True, {"detect": 1.0}, AT, Trigger.ROUND)])
    store.save_states([TargetState("queue_backlog", {"pod": "x"}, False, {}, AT, Trigger.API)])
    [state] = store.states()
    assert (state.present, dict(state.values), state.trigger) == (False, {}, Trigger.API)


def test_evidence_round_trips_with_nan_and_infinity(store: Store) -> None:
    weird = Evidence(
        check="c",
        query="q",
        operator="ratio_above",
        threshold=1.5,
        value=math.inf,
        baseline=0.0,
        baseline_at=AT - timedelta(days=1),
        unit="s",
        assumed={"max_num_seqs": 256},
        context={"t": math.nan},
    )
    rc = replace(cause("kv_pool_full"), evidence=(weird,), excess=math.inf)
    f = finding(root_cause=rc)
    store.save([f])
    [back] = store.active()
    e = back.root_cause.evidence[0]
    assert e.value == math.inf
    assert e.baseline == 0.0
    assert e.baseline_at == AT - timedelta(days=1)
    assert e.context["t"] is not None
    assert math.isnan(e.context["t"])
    assert back.root_cause.excess == math.inf
    assert back.root_cause.title.zh == "原因"


def test_episodes_and_forgetting(store: Store) -> None:
    old = finding(state=State.RESOLVED, resolved_by=ResolvedBy.CLEAR)
    new = finding(phase=Phase(State.PENDING, AT + timedelta(hours=1)))
    store.save([old, new])
    assert [e.state for e in store.episodes(new.fingerprint)] == [State.PENDING, State.RESOLVED]
    store.save([], [(new.fingerprint, new.phase.active_at)])
    assert [e.state for e in store.episodes(new.fingerprint)] == [State.RESOLVED]
    assert store.episodes("nope") == []


def test_filters(store: Store) -> None:
    tricky = 'vllm-"1"\\ü'
    store.save(
        [
            finding("vllm-0"),
            finding(tricky, cause_id="concurrency_slots_full"),
            finding("vllm-2", state=State.RESOLVED),
            finding("vllm-3", state=State.PENDING),
        ]
    )

    def pods(**query: object) -> list[str]:
        return sorted(f.labels["pod"] for f in store.findings(FindingQuery(**query)))  # type: ignore[arg-type]

    assert pods() == sorted(["vllm-0", "vllm-2", "vllm-3", tricky])
    assert pods(states=(State.PENDING, State.FIRING)) == sorted(["vllm-0", "vllm-3", tricky])
    assert pods(cause="concurrency_slots_full") == [tricky]
    assert pods(labels={"pod": tricky}) == [tricky]
    assert pods(labels={"pod": tricky, "namespace": "other"}) == []
    assert pods(symptom="ttft_high") == []
    assert pods(since=AT + timedelta(minutes=10)) == sorted(["vllm-0", "vllm-3", tricky])  # vllm-2 resolved before
    assert pods(until=AT - timedelta(minutes=1)) == []
    assert len(store.findings(FindingQuery(limit=2))) == 2
    # active ones first
    assert store.findings(FindingQuery())[-1].state is State.RESOLVED


def test_retention_keeps_what_is_active_or_recent(store: Store) -> None:
    store.save([finding("vllm-0", state=State.RESOLVED), finding("vllm-1")])
    store.save_states([TargetState("queue_backlog", {"pod": "x"}, True, {}, AT, Trigger.ROUND)])
    assert store.purge(AT) == 0
    assert store.purge(AT + timedelta(days=1)) == 2
    assert [f.labels["pod"] for f in store.findings(FindingQuery())] == ["vllm-1"]
    assert store.states() == []


def test_purge_works_in_chunks(store: Store) -> None:
    store.save([finding(f"vllm-{i}", state=State.RESOLVED) for i in range(5)])
    assert store.purge(AT + timedelta(days=1), chunk=2) == 2
    assert store.purge(AT + timedelta(days=1), chunk=2) == 2
    assert store.purge(AT + timedelta(days=1), chunk=2) == 1
    assert store.purge(AT + timedelta(days=1), chunk=2) == 0


def test_a_file_that_is_not_a_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, " * 100)
    with pytest.raises(StoreError) as error:
        Store.open(path)
    assert str(path) in str(error.value)
    assert "not a usable diagnosd store" in str(error.value)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(StoreError, match=r"schema version 99 is newer than this diagnosd \(3\)"):
        Store.open(path)


def test_a_row_in_a_format_this_code_cannot_read_is_a_clear_error(store: Store) -> None:
    """A newer diagnosd wrote it (same schema, a newer row format), then this one was rolled back to."""
    store.save([finding()])
    store.database.execute("UPDATE findings SET format = 7")
    with pytest.raises(StoreError) as error:
        store.active()
    assert error.value.path == store.database.path
    assert "is stored in format 7; this diagnosd reads [1]" in error.value.reason


def test_a_path_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open"):
        Store.open(blocker / "findings.db")

"""What a push sink sees of the tracker: firing findings, episodes started and ended."""

from __future__ import annotations

from datetime import timedelta

from diagnosd.findings.lifecycle import Finding, State
from diagnosd.sinks.watch import Watch
from tests.sinks.builders import AT, finding


def test_only_firing_findings_count_and_each_episode_starts_and_ends_once() -> None:
    findings: list[Finding] = [finding("vllm-0"), finding("vllm-1", State.PENDING)]
    watch = Watch(lambda: findings)
    first = watch.look()
    assert [f.labels["pod"] for f in first.started] == ["vllm-0"]
    assert first.ended == ()
    again = watch.look()
    assert again.started == again.ended == ()
    assert [f.labels["pod"] for f in again.firing] == ["vllm-0"]
    findings[:] = [finding("vllm-1")]
    moved = watch.look()
    assert [f.labels["pod"] for f in moved.started] == ["vllm-1"]
    assert [f.labels["pod"] for f in moved.ended] == ["vllm-0"]


def test_a_new_episode_of_the_same_finding_ends_the_old_one() -> None:
    findings = [finding("vllm-0")]
    watch = Watch(lambda: findings)
    watch.look()
    findings[:] = [finding("vllm-0", active_at=AT + timedelta(hours=1))]
    look = watch.look()
    assert [f.phase.active_at for f in look.ended] == [AT]
    assert [f.phase.active_at for f in look.started] == [AT + timedelta(hours=1)]

"""Diagnosis -> per-cause observations: holds, clear, or unknown (never clear for lack of a look)."""

from __future__ import annotations

from diagnosd.findings.lifecycle import Observed
from diagnosd.findings.model import Verdict
from diagnosd.findings.observe import observe
from tests.findings.builders import check, diagnosis, fleetwide, target


def seen(*checks_: object, present: bool | None = True, causes: tuple[str, ...] = ()) -> dict[str, Observed]:
    d = diagnosis(target("vllm-0", present, list(checks_), causes))  # type: ignore[arg-type]
    return {o.cause: o.seen for o in observe(d)}


def test_a_root_cause_holds_with_its_evidence() -> None:
    d = diagnosis(target("vllm-0", True, [check("kv", Verdict.MATCHED, 0.95, "kv_pool_full")], ["kv_pool_full"]))
    [o] = observe(d)
    assert (o.cause, o.seen, dict(o.labels)) == ("kv_pool_full", Observed.HOLDS, {"namespace": "prod", "pod": "vllm-0"})
    assert o.root_cause is not None
    assert o.root_cause.evidence[0].value == 0.95


def test_a_check_that_ran_clear_is_clear_and_one_that_could_not_is_unknown() -> None:
    result = seen(check("a", Verdict.CLEAR, 0.1, "cause_a"), check("b", Verdict.UNKNOWN, None, "cause_b"))
    assert result == {"cause_a": Observed.CLEAR, "cause_b": Observed.UNKNOWN}


def test_no_symptom_clears_every_cause_even_unknown_checks() -> None:
    result = seen(check("b", Verdict.UNKNOWN, None, "cause_b"), present=False)
    assert result == {"cause_b": Observed.CLEAR}


def test_a_skipped_child_answers_as_the_parent_that_ran() -> None:
    under_clear = seen(check("p", Verdict.CLEAR, 0.1), check("c", Verdict.SKIPPED, None, "child", parent="p"))
    under_unknown = seen(check("p", Verdict.UNKNOWN), check("c", Verdict.SKIPPED, None, "child", parent="p"))
    assert under_clear == {"child": Observed.CLEAR}
    assert under_unknown == {"child": Observed.UNKNOWN}


def test_manual_causes_are_never_observed() -> None:
    assert seen(check("m", Verdict.MANUAL, None, "requests_not_released")) == {}


def test_a_cause_with_two_checks_is_unknown_if_either_could_not_look() -> None:
    result = seen(check("a", Verdict.CLEAR, 0.1, "twice"), check("b", Verdict.UNKNOWN, None, "twice"))
    assert result == {"twice": Observed.UNKNOWN}


def test_a_fleet_level_cause_is_one_finding_for_the_scope_where_the_symptom_is() -> None:
    scope = {"namespace": "prod"}
    fleet = [o for o in observe(fleetwide(True, Verdict.MATCHED, scope)) if o.labels.get("level") == "fleet"]
    assert [(o.cause, dict(o.labels), o.seen) for o in fleet] == [
        ("idle_gpus", {"namespace": "prod", "level": "fleet"}, Observed.HOLDS)
    ]
    assert fleet[0].root_cause is not None
    # The target itself never holds it: it reads unknown (fleet_level), not a root cause.
    [on_target] = [o for o in observe(fleetwide(True, Verdict.MATCHED, scope)) if "pod" in o.labels]
    assert on_target.seen is Observed.UNKNOWN


def test_a_fleet_level_cause_needs_the_symptom() -> None:
    """Matched fleet-wide, but no target has the symptom: clear where it is absent, unknown where unseen."""
    [absent] = [o for o in observe(fleetwide(False, Verdict.MATCHED)) if "pod" not in o.labels]
    assert absent.seen is Observed.CLEAR
    [unseen] = [o for o in observe(fleetwide(None, Verdict.MATCHED)) if "pod" not in o.labels]
    assert unseen.seen is Observed.UNKNOWN
    [ran_clear] = [o for o in observe(fleetwide(True, Verdict.CLEAR)) if "pod" not in o.labels]
    assert ran_clear.seen is Observed.CLEAR
    [could_not] = [o for o in observe(fleetwide(True, Verdict.UNKNOWN)) if "pod" not in o.labels]
    assert could_not.seen is Observed.UNKNOWN

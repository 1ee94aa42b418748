"""Evidence.evolve: the copy dataclasses.replace makes, without its per-field re-construction."""

from __future__ import annotations

import pickle
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from diagnosd.findings.model import Evidence, Verdict

BASE = Evidence(
    check="kv",
    query="max by (pod) (vllm:kv_cache_usage_perc)",
    operator="ratio_above",
    threshold=1.3,
    value=0.9,
    baseline=0.5,
    baseline_at=datetime(2026, 12, 1, tzinfo=UTC),
    context={"waiting": 3.0},
)


def test_evolve_is_the_copy_replace_makes() -> None:
    changes = {"value": 0.95, "verdict": Verdict.MATCHED, "warnings": ("partial",)}
    evolved = BASE.evolve(**changes)
    assert evolved == replace(BASE, **changes)  # type: ignore[arg-type]
    assert evolved.compared == pytest.approx(0.95 / 0.5)
    # The original is untouched.
    assert BASE.value == 0.9
    assert BASE.verdict is None
    assert pickle.loads(pickle.dumps(evolved)) == evolved
    with pytest.raises(AttributeError):
        evolved.value = 1.0  # type: ignore[misc]  # still frozen


def test_evolve_refuses_a_field_evidence_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field valeu"):
        BASE.evolve(valeu=1.0)

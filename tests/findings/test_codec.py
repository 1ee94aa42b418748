"""The wire's encoding of a root cause (render/json.py, the API): valid JSON whatever the numbers."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from diagnosd.findings.codec import encode_cause
from tests.findings.builders import cause


def test_a_cause_carries_its_consequences_and_their_evidence() -> None:
    consequence = replace(cause("gpu_compute_contention", 3.6), explained_by=("prompt_inflation",))
    root = replace(cause("prompt_inflation", 2.5), explains=(consequence,))
    root = replace(root, evidence=tuple(replace(e, warnings=("store 10.0.0.7 down",)) for e in root.evidence))
    data = json.loads(json.dumps(encode_cause(root)))
    assert data["explains"][0]["cause"] == "gpu_compute_contention"
    assert data["explains"][0]["explained_by"] == ["prompt_inflation"]
    assert data["explains"][0]["evidence"][0]["value"] == 3.6
    assert data["evidence"][0]["warnings"] == ["store 10.0.0.7 down"]
    assert data["evidence"][0]["compared"] == 2.5


def test_non_finite_numbers_anywhere_in_the_evidence_are_valid_json() -> None:
    """A quantile beyond the top bucket (+Inf) or an unset limit (.inf) must not break the response."""
    base = cause("batch_too_large")
    evidence = replace(base.evidence[0], value=math.inf, assumed={"max_num_seqs": math.inf, "note": "x"})
    text = json.dumps(encode_cause(replace(base, evidence=(evidence,))), allow_nan=False)
    encoded = json.loads(text)["evidence"][0]
    assert encoded["value"] == "+Inf"
    assert encoded["assumed"] == {"max_num_seqs": "+Inf", "note": "x"}

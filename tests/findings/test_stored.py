"""The stored shape of a finding: a row as the first format wrote it still decodes to the same
Finding, the encoder still writes exactly that row, and old rows without later keys load."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from diagnosd.findings.stored import FORMAT, decode_cause, encode_cause, finding_from_row, finding_row
from tests.findings.builders import cause
from tests.storage.frozen_v1 import FINDING, FINDING_ROW, without_nan


def test_a_format_1_row_decodes_to_the_finding_it_was_written_from() -> None:
    decoded = finding_from_row((*FINDING_ROW, 1))
    idle = decoded.root_cause.evidence[0].context["idle"]
    assert idle is not None
    assert math.isnan(idle)
    assert without_nan(decoded) == without_nan(FINDING)
    # Down to the numbers JSON cannot hold and the Chinese text.
    assert decoded.root_cause.explains[0].excess == -math.inf
    assert decoded.root_cause.evidence[0].assumed == {"max_num_seqs": math.inf, "engine": "vllm"}
    assert decoded.root_cause.title.zh == "KV 缓存池已满"


def test_the_encoder_writes_format_1_exactly_as_it_always_has() -> None:
    """A change here is a new format: a new FORMAT and decoder, the format 1 decoder kept."""
    assert FORMAT == 1
    assert finding_row(FINDING) == (*FINDING_ROW, 1)


def test_a_format_this_code_does_not_know_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"finding 5c1f0e4b2a9d7f31 is stored in format 2; this diagnosd reads \[1\]"):
        finding_from_row((*FINDING_ROW, 2))


def test_a_cause_with_its_consequences_round_trips() -> None:
    consequence = replace(cause("gpu_compute_contention", 3.6), explained_by=("prompt_inflation",))
    root = replace(cause("prompt_inflation", 2.5), explains=(consequence,))
    root = replace(root, evidence=tuple(replace(e, warnings=("store 10.0.0.7 down",)) for e in root.evidence))
    assert decode_cause(json.loads(json.dumps(encode_cause(root), allow_nan=False))) == root


def test_a_row_stored_before_causal_ranking_still_loads() -> None:
    data = encode_cause(cause("kv_pool_full"))
    for key in ("explains", "explained_by"):
        del data[key]
    for e in data["evidence"]:
        del e["warnings"]
    old = decode_cause(data)
    assert old.explains == ()
    assert old.explained_by == ()
    assert all(e.warnings == () for e in old.evidence)
    assert old == cause("kv_pool_full")

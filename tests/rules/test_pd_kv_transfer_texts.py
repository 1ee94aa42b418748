"""pd_kv_transfer_slow says what its checks measure, in both languages.

Wording a series test cannot see: the seed's "prefill 太少 → KV 产生量 > 消费量" has the direction
reversed (KV produced faster than consumed is a decode side that cannot keep up), and NIXL / Mooncake
transfers never show in the NCCL logs the seed sends you to.
"""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import RULES

TREE = RULES / "pd_kv_transfer_slow.yaml"


def _node(node_id: str) -> dict[str, Any]:
    tree = yaml.safe_load(TREE.read_text(encoding="utf-8"))
    [node] = [n for n in tree["nodes"] if n["id"] == node_id]
    return dict(node)


def test_the_backlog_is_named_for_the_decode_side_and_the_seed_text_is_kept_with_its_correction() -> None:
    conclusion = _node("prefill_decode_ratio")["conclusion"]
    assert "decode" in conclusion["title"]["zh"]
    assert "prefill 太少" not in conclusion["title"]["zh"]
    assert "decode" in conclusion["title"]["en"]
    assert "too few prefill" not in conclusion["title"]["en"].lower()
    zh = " ".join(r["zh"] for r in conclusion["remediation"])
    en = " ".join(r["en"] for r in conclusion["remediation"])
    assert "prefill 太少 → KV 产生量 > 消费量，堆积" in zh  # the seed's words stay
    assert "decode 相对 prefill 太少" in zh
    assert "增加 decode 实例" in zh
    assert "too few decode instances" in en
    assert "Add decode instances" in en


def test_the_tcp_fallback_check_says_nixl_and_mooncake_are_not_in_the_nccl_logs() -> None:
    node = _node("nccl_tcp_fallback")
    for lang in ("zh", "en"):
        manual = node["manual"][lang]
        assert "NIXL" in manual, lang
        assert "Mooncake" in manual, lang
        remediation = " ".join(r[lang] for r in node["conclusion"]["remediation"])
        for word in ("NIXL", "Mooncake", "UCX_PROTO_INFO=y", "UCX_TLS", "rdma"):
            assert word in remediation, (lang, word)
    assert "UCX_PROTO_INFO" in node["could_observe"]
    assert "Mooncake" in node["could_observe"]


def test_the_sglang_backlog_is_requests_waiting_for_decode_kv_memory_not_kv_that_arrived() -> None:
    # SGLang's decode PreallocQueue holds requests until KV memory is free to pre-allocate on the
    # decode side; their KV has not been sent yet (that is the TransferQueue, then the waiting queue).
    tree = yaml.safe_load(TREE.read_text(encoding="utf-8"))
    assert "(or is pre-allocated)" not in tree["params"]["kv_backlog"]["doc"]
    assert "pre-allocate" in tree["params"]["kv_backlog"]["doc"]
    caveat = _node("prefill_decode_ratio")["conclusion"]["caveat"]
    assert "已预分配" not in caveat["zh"]
    assert "预分配 KV 显存" in caveat["zh"]
    assert "been pre-allocated" not in caveat["en"]
    assert "wait for KV memory to be pre-allocated" in caveat["en"]

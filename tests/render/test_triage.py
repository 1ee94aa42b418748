"""The triage board: worst first as given, one evidence line per target, one clear line, one line per
symptom not looked at with its reason; English, Chinese and JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from diagnosd.findings import CheckResult, Evidence, NodeKind, RootCause, Verdict
from diagnosd.findings.triage import Board, Clear, Hit, Present, Unknown, Unseen
from diagnosd.render.text import describe
from diagnosd.render.triage import SHOWN, board, render
from diagnosd.trees import Severity, Text

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def t(en: str) -> Text:
    return Text(en=en, zh=f"中{en}")


def hit(pod: str, cause: str | None, value: float = 0.97) -> Hit:
    detect_evidence = Evidence(check="detect", query="q", operator="above", threshold=10, value=25, unit="requests")
    detect = CheckResult(
        id="detect",
        kind=NodeKind.DETECT,
        title=t("waiting"),
        depth=0,
        verdict=Verdict.MATCHED,
        evidence=detect_evidence,
    )
    if cause is None:
        return Hit({"namespace": "prod", "pod": pod}, detect, None, detect_evidence)
    evidence = Evidence(check="kv", query="q", operator="above", threshold=0.9, value=value)
    root = RootCause(cause, t("KV pool full"), Severity.CRITICAL, (t("add GPUs"),), "kv", 1, 1.1, (evidence,))
    return Hit({"namespace": "prod", "pod": pod}, detect, root, evidence)


def example(many: int = 2) -> Board:
    hits = (hit("vllm-1", "kv_pool_full"), *(hit(f"vllm-{i}", None) for i in range(2, many + 1)))
    return Board(
        evaluated_at=AT,
        scope={"namespace": "prod"},
        present=(
            Present("queue_backlog", t("Queue backs up"), ("namespace", "pod"), hits, (), 5, many + 3),
            Present(
                "kv_hit_low",
                t("Hit ratio low"),
                ("namespace", "pod"),
                (hit("vllm-0", None),),
                (Unseen("no_baseline", "nothing 1d ago to compare with", 2),),
                3,
                3,
            ),
        ),
        clear=(Clear("tpot_high", t("TPOT"), 3), Clear("kv_hit_drop", t("drop"), 3)),
        unknown=(
            Unknown("ttft_high", t("TTFT rose"), (Unseen("no_baseline", "nothing 1d ago to compare with", 3),)),
            Unknown("gpu_underutilized", t("GPU idle"), (Unseen("exporter_absent", "no dcgm-exporter series"),)),
            Unknown("inference_oom", t("OOM"), (Unseen("query_error", "bad_data: parse error", 0),), clear=1),
        ),
        queries=31,
        targets=5,
    )


def test_text_board_worst_first_with_one_evidence_line_per_target() -> None:
    text = render(example())
    lines = text.splitlines()
    assert lines[0] == "diagnosd triage @ 2026-03-01T12:00:00Z · 5 targets · 7 symptoms · 31 queries"
    assert lines[1] == "scope: namespace='prod'"
    assert lines[3] == "▲ queue_backlog [critical] — 2 of 5 targets: Queue backs up"
    assert lines[4] == "    namespace=prod pod=vllm-1 → kv_pool_full [critical] KV pool full"
    assert lines[5] == "        kv: " + describe(hit("vllm-1", "kv_pool_full").evidence)  # type: ignore[arg-type]
    assert lines[6] == "    namespace=prod pod=vllm-2 → no root cause found among the checks that could run"
    assert lines[7].startswith("        detect: ")
    assert lines[9] == "▲ kv_hit_low — 1 of 3 targets: Hit ratio low"
    assert "    ? no baseline yet (2 targets): nothing 1d ago to compare with" in lines
    assert [line for line in lines if line.startswith("· ")] == ["· clear (2): tpot_high, kv_hit_drop"]
    unknown = [line for line in lines if line.startswith("? ")]
    assert unknown == [
        "? ttft_high · TTFT rose — no baseline yet (3 targets): nothing 1d ago to compare with",
        "? gpu_underutilized · GPU idle — exporter absent: no dcgm-exporter series",
        "? inference_oom · OOM — query error: bad_data: parse error (1 clear)",
    ]


def test_many_targets_are_cut_in_text_not_in_json() -> None:
    big = example(many=SHOWN + 5)
    text = render(big)
    assert f"… and {SHOWN + 5 - SHOWN} more (--format json lists every target)" in text
    assert len(board(big)["present"][0]["hits"]) == SHOWN + 5


def test_chinese_board() -> None:
    text = render(example(), "zh")
    assert "diagnosd 巡检 @ 2026-03-01T12:00:00Z · 5 个目标 · 7 个症状 · 31 次查询" in text
    assert "范围：namespace='prod'" in text
    assert "▲ queue_backlog [严重] — 5 个目标中的 2 个：中Queue backs up" in text
    assert "→ kv_pool_full [严重] 中KV pool full" in text
    assert "· 正常（2）：tpot_high, kv_hit_drop" in text
    assert "? ttft_high · 中TTFT rose — 尚无基线（3 个目标）：1d 前没有可比较的值" in text
    assert "? gpu_underutilized · 中GPU idle — 缺少导出器：no dcgm-exporter series" in text


def test_nothing_found_and_nothing_looked_at() -> None:
    calm = Board(AT, {}, (), (Clear("tpot_high", t("TPOT"), 3),), (), 2, 3)
    assert "nothing found: no symptom is present on any target" in render(calm)
    blind = Board(AT, {}, (), (), (Unknown("ttft_high", t("TTFT"), (Unseen("metric_absent", "x"),)),), 1, 0)
    assert "nothing could be looked at" in render(blind)
    assert "scope:" not in render(blind)


def test_json_board() -> None:
    body = json.loads(json.dumps(board(example())))
    assert body["found"] is True
    assert [p["symptom"] for p in body["present"]] == ["queue_backlog", "kv_hit_low"]
    first = body["present"][0]
    assert first["severity"] == "critical"
    assert first["targets"] == 2
    assert first["seen"] == 5
    assert first["hits"][0]["labels"] == {"namespace": "prod", "pod": "vllm-1"}
    assert first["hits"][0]["cause"]["cause"] == "kv_pool_full"
    assert first["hits"][0]["evidence"]["value"] == 0.97
    assert first["hits"][1]["cause"] is None
    assert first["hits"][1]["detect"]["verdict"] == "matched"
    assert body["present"][1]["severity"] is None
    assert body["present"][1]["unknown"] == [
        {"reason": "no_baseline", "detail": "nothing 1d ago to compare with", "targets": 2}
    ]
    assert body["clear"][0] == {"symptom": "tpot_high", "title": {"en": "TPOT", "zh": "中TPOT"}, "targets": 3}
    assert body["unknown"][2] == {
        "symptom": "inference_oom",
        "title": {"en": "OOM", "zh": "中OOM"},
        "clear": 1,
        "reasons": [{"reason": "query_error", "detail": "bad_data: parse error", "targets": 0}],
    }

"""The triage board as text (worst first, one evidence line per target) and as JSON-ready data."""

from __future__ import annotations

import re
from typing import Any

from diagnosd.findings.triage import Board, Hit, Present, Unknown, Unseen
from diagnosd.render import json as render_json
from diagnosd.render.text import describe, detail_text, pick

# At most this many targets per present symptom in the text board; JSON lists them all.
SHOWN = 10

WORDS: dict[str, dict[str, str]] = {
    "en": {
        "head": "diagnosd triage @ {at} · {targets} targets · {symptoms} symptoms · {queries} queries",
        "targets": "{n} targets",
        "target": "1 target",
        "of": "{n} of {m} targets",
        "none": "nothing found: no symptom is present on any target",
        "no_cause": "no root cause found among the checks that could run",
        "more": "… and {n} more (--format json lists every target)",
        "clear": "clear ({n})",
        "cleared": "{n} clear",
        "nothing": "nothing could be looked at",
        "scope": "scope: ",
    },
    "zh": {
        "head": "diagnosd 巡检 @ {at} · {targets} 个目标 · {symptoms} 个症状 · {queries} 次查询",
        "targets": "{n} 个目标",
        "target": "1 个目标",
        "of": "{m} 个目标中的 {n} 个",
        "none": "未发现问题：没有任何目标出现症状",
        "no_cause": "可执行的检查中未找到根因",
        "more": "… 另有 {n} 个（--format json 列出全部目标）",
        "clear": "正常（{n}）",
        "cleared": "{n} 个正常",
        "nothing": "没有任何症状可以判断",
        "scope": "范围：",
    },
}
SEVERITY = {"zh": {"info": "提示", "warning": "警告", "critical": "严重"}}
# The details the triage itself writes (English) and their Chinese: (pattern, replacement).
DETAILS_ZH: tuple[tuple[str, str], ...] = (
    (r"^nothing (\S+) ago to compare with, and no value now$", r"\1 前没有可比较的值，当前也没有值"),
    (r"^nothing (\S+) ago to compare with$", r"\1 前没有可比较的值"),
    (r"^Prometheus holds (\S+) of history; this query reads (\S+)$", r"Prometheus 只有 \1 的历史数据；该查询需要 \2"),
    (r"^no target has a value now \(not on this Prometheus: (.+)\)$", r"当前没有任何目标有值（Prometheus 上没有：\1）"),
    (
        r"^no target has a value now \(metric name discovery unsupported\)$",
        "当前没有任何目标有值（后端不支持指标名发现）",
    ),
    (r"^no target has a value now$", "当前没有任何目标有值"),
    (r"^not on this Prometheus: (.+)$", r"Prometheus 上没有：\1"),
    (r"^no (.+) series on this Prometheus \((.+)\)$", r"Prometheus 上没有 \1 的序列（\2）"),
    (r"^some checks could not run: (.+)$", r"部分检查无法执行：\1"),
    (r"^the tree walk failed: (.+)$", r"检查树遍历失败：\1"),
)
REASONS: dict[str, dict[str, str]] = {
    "en": {
        "exporter_absent": "exporter absent",
        "metric_absent": "metric absent",
        "no_data": "no data",
        "no_baseline": "no baseline yet",
        "query_error": "query error",
        "timeout": "timeout",
        "unreachable": "Prometheus unreachable",
        "zero_over_zero": "0/0 (no observations in the window)",
        "low_traffic": "too little traffic",
        "bad_value": "bad value",
        "infinite": "infinite value",
        "partial": "partial answer from Prometheus",
        "short_history": "not enough history yet",
        "fleet_level": "fleet-level answer",
    },
    "zh": {
        "exporter_absent": "缺少导出器",
        "metric_absent": "缺少指标",
        "no_data": "无数据",
        "no_baseline": "尚无基线",
        "query_error": "查询出错",
        "timeout": "超时",
        "unreachable": "无法连接 Prometheus",
        "zero_over_zero": "0/0（窗口内无观测）",
        "low_traffic": "流量太少",
        "bad_value": "值无效",
        "infinite": "值为无穷",
        "partial": "Prometheus 只返回了部分结果",
        "short_history": "历史数据尚不足",
        "fleet_level": "全局结果",
    },
}


def render(board: Board, lang: str = "en") -> str:
    words = WORDS[lang]
    symptoms = len(board.present) + len(board.clear) + len(board.unknown)
    head = words["head"].format(
        at=render_json.timestamp(board.evaluated_at), targets=board.targets, symptoms=symptoms, queries=board.queries
    )
    lines = [head]
    if board.scope:
        lines.append(words["scope"] + " ".join(f"{k}={v!r}" for k, v in board.scope.items()))
    lines.append("")
    for present in board.present:
        lines.extend(_present(present, lang))
    if not board.present:
        lines.append(words["nothing"] if board.blind else words["none"])
    if board.clear:
        names = ", ".join(c.symptom for c in board.clear)
        lines.append(f"· {words['clear'].format(n=len(board.clear))}{_colon(lang)}{names}")
    lines.extend(_unknown(u, lang) for u in board.unknown)
    return "\n".join(lines) + "\n"


def _present(p: Present, lang: str) -> list[str]:
    words = WORDS[lang]
    severity = f" [{_severity(str(p.severity), lang)}]" if p.severity else ""
    many = words["of"].format(n=len(p.hits), m=p.seen) if p.seen > len(p.hits) else _count(len(p.hits), lang)
    lines = [f"▲ {p.symptom}{severity} — {many}{_colon(lang)}{pick(p.title, lang)}"]
    for hit in p.hits[:SHOWN]:
        lines.extend(_hit(hit, lang))
    if len(p.hits) > SHOWN:
        lines.append("    " + words["more"].format(n=len(p.hits) - SHOWN))
    lines.extend(f"    ? {_unseen(u, lang)}" for u in p.unseen)
    return [*lines, ""]


def _hit(hit: Hit, lang: str) -> list[str]:
    name = " ".join(f"{k}={v}" for k, v in hit.labels.items())
    if hit.cause is None:
        head = f"    {name} → {WORDS[lang]['no_cause']}"
    else:
        cause = hit.cause
        head = f"    {name} → {cause.cause} [{_severity(str(cause.severity), lang)}] {pick(cause.title, lang)}"
    if hit.evidence is None:
        return [head]
    return [head, f"        {hit.evidence.check}: {describe(hit.evidence, lang)}"]


def _unknown(u: Unknown, lang: str) -> str:
    reasons = "; ".join(_unseen(r, lang) for r in u.reasons)
    cleared = WORDS[lang]["cleared"].format(n=u.clear) if u.clear else ""
    cleared = (f"（{cleared}）" if lang == "zh" else f" ({cleared})") if cleared else ""
    return f"? {u.symptom} · {pick(u.title, lang)} — {reasons}{cleared}"


def _unseen(u: Unseen, lang: str) -> str:
    label = REASONS[lang].get(u.reason, u.reason)
    count = (f"（{_count(u.targets, lang)}）" if lang == "zh" else f" ({_count(u.targets, lang)})") if u.targets else ""
    return f"{label}{count}{_colon(lang)}{_detail(u.detail, lang)}" if u.detail else f"{label}{count}"


def _colon(lang: str) -> str:
    return "：" if lang == "zh" else ": "


def _severity(severity: str, lang: str) -> str:
    return SEVERITY.get(lang, {}).get(severity, severity)


def _detail(detail: str, lang: str) -> str:
    if lang != "zh":
        return detail
    for pattern, replacement in DETAILS_ZH:
        translated, count = re.subn(pattern, replacement, detail)
        if count:
            return translated
    return detail_text(detail, lang)


def _count(n: int, lang: str) -> str:
    return WORDS[lang]["target"] if n == 1 else WORDS[lang]["targets"].format(n=n)


def board(b: Board) -> dict[str, Any]:
    return {
        "evaluated_at": render_json.timestamp(b.evaluated_at),
        "scope": dict(b.scope),
        "found": b.found,
        "queries": b.queries,
        "targets": b.targets,
        "present": [_present_json(p) for p in b.present],
        "clear": [{"symptom": c.symptom, "title": render_json.text(c.title), "targets": c.targets} for c in b.clear],
        "unknown": [
            {
                "symptom": u.symptom,
                "title": render_json.text(u.title),
                "clear": u.clear,
                "reasons": [_unseen_json(r) for r in u.reasons],
            }
            for u in b.unknown
        ],
    }


def _present_json(p: Present) -> dict[str, Any]:
    return {
        "symptom": p.symptom,
        "title": render_json.text(p.title),
        "severity": str(p.severity) if p.severity else None,
        "targets": len(p.hits),
        "seen": p.seen,
        "target_labels": list(p.target_labels),
        "queries": p.queries,
        "hits": [
            {
                "labels": dict(h.labels),
                "cause": render_json.encode_cause(h.cause) if h.cause else None,
                "evidence": render_json.encode_evidence(h.evidence) if h.evidence else None,
                "detect": render_json.check(h.detect),
            }
            for h in p.hits
        ],
        "unknown": [_unseen_json(u) for u in p.unseen],
    }


def _unseen_json(u: Unseen) -> dict[str, Any]:
    return {"reason": u.reason, "detail": u.detail, "targets": u.targets}

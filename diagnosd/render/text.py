"""The Diagnosis drawn like the seed's own trees (├─ │ └─), one mark per node, numbers on every line."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from diagnosd.findings.model import CheckResult, Diagnosis, Evidence, NodeKind, RootCause, TargetDiagnosis, Verdict
from diagnosd.render.json import timestamp
from diagnosd.trees.model import Text

MARKS = {
    Verdict.MATCHED: "▲",
    Verdict.CLEAR: "·",
    Verdict.UNKNOWN: "?",
    Verdict.MANUAL: "☐",
    Verdict.SKIPPED: "–",
}
LEGEND = {
    "en": "▲ matched  · clear  ? unknown (could not look)  ☐ for a person  – not asked (parent clear)",
    "zh": "▲ 命中  · 排除  ? 未知（无法判断）  ☐ 人工检查  – 未执行（上级未命中）",
}
OPERATORS = {"above": ">", "below": "<", "ratio_above": ">", "ratio_below": "<", "delta_above": ">", "delta_below": "<"}


def render(d: Diagnosis, lang: str = "en") -> str:
    lines = [f"{d.symptom} · {pick(d.title, lang)}  @ {timestamp(d.evaluated_at)}"]
    if d.scope:
        lines.append("scope: " + " ".join(f"{k}={v!r}" for k, v in d.scope.items()))
    lines.extend(f"note: {note}" for note in d.notes)
    if not d.targets:
        lines.append("no target in scope has data for this symptom (nothing could be looked at)")
    for t in d.targets:
        lines.append("")
        lines.extend(_target(t, lang))
    lines += ["", LEGEND[lang]]
    return "\n".join(lines) + "\n"


def _target(t: TargetDiagnosis, lang: str) -> list[str]:
    name = " ".join(f"{k}={v}" for k, v in t.labels.items())
    state = {True: "SYMPTOM PRESENT", False: "symptom not present", None: "symptom UNKNOWN"}[t.symptom_present]
    lines = [f"{name} — {state}: {pick(t.detect.title, lang)}{_numbers(t.detect)}"]
    lines.extend(_tree(t.checks, {c.check: c for c in t.root_causes}, lang))
    if t.root_causes:
        lines.append("root causes, most likely first:")
        for rank, cause in enumerate(t.root_causes, 1):
            lines.append(f"  {rank}. {cause.cause} [{cause.severity}] {pick(cause.title, lang)}")
    elif t.symptom_present is not False:
        lines.append("no root cause found among the checks that could run; see ? and ☐ above")
    return lines


def _tree(checks: Sequence[CheckResult], causes: Mapping[str, RootCause], lang: str) -> list[str]:
    lines: list[str] = []
    for index, check in enumerate(checks):
        prefix = _prefix(checks, index)
        lines.append(f"{prefix}{MARKS[check.verdict]} {pick(check.title, lang)}{_numbers(check)}")
        inner = _continuation(checks, index) + ("│  " if not _last_sibling(checks, index) else "   ")
        inner += "│  " if _has_children(checks, index) else "   "
        if check.kind is NodeKind.MANUAL and check.guidance:
            lines.append(f"{inner}{pick(check.guidance, lang)}")
        cause = causes.get(check.id)
        if cause is not None:
            lines.append(f"{inner}→ {pick(cause.title, lang)}")
            lines.extend(f"{inner}  fix: {pick(r, lang)}" for r in cause.remediation)
            if cause.caveat:
                lines.append(f"{inner}  caveat: {pick(cause.caveat, lang)}")
    return lines


def _prefix(checks: Sequence[CheckResult], index: int) -> str:
    return _continuation(checks, index) + ("└─ " if _last_sibling(checks, index) else "├─ ")


def _continuation(checks: Sequence[CheckResult], index: int) -> str:
    """The vertical bars of every ancestor that still has siblings below."""
    parts: list[str] = []
    depth = checks[index].depth
    for level in range(1, depth):
        ancestor = _ancestor(checks, index, level)
        parts.append("   " if ancestor is None or _last_sibling(checks, ancestor) else "│  ")
    return "".join(parts)


def _ancestor(checks: Sequence[CheckResult], index: int, level: int) -> int | None:
    for j in range(index, -1, -1):
        if checks[j].depth == level:
            return j
    return None


def _last_sibling(checks: Sequence[CheckResult], index: int) -> bool:
    depth = checks[index].depth
    for later in checks[index + 1 :]:
        if later.depth < depth:
            return True
        if later.depth == depth:
            return False
    return True


def _has_children(checks: Sequence[CheckResult], index: int) -> bool:
    return index + 1 < len(checks) and checks[index + 1].depth > checks[index].depth


def _numbers(check: CheckResult) -> str:
    e = check.evidence
    if check.verdict is Verdict.UNKNOWN:
        return f"  [unknown: {check.reason}{' — ' + check.detail if check.detail else ''}]"
    if check.verdict is Verdict.SKIPPED or e is None:
        return ""
    return "  " + describe(e)


def describe(e: Evidence) -> str:
    op = OPERATORS.get(e.operator, e.operator)
    unit = f" {e.unit}" if e.unit and e.unit not in ("ratio",) else ""
    assumed = f"  (assumed {', '.join(f'{k}={_param(v)}' for k, v in e.assumed.items())})" if e.assumed else ""
    context = "".join(f"  {k}={fmt(v)}" for k, v in e.context.items())
    if e.operator.startswith("ratio_"):
        return (
            f"{fmt(e.value)}{unit} vs baseline {fmt(e.baseline)} = ×{fmt(e.compared)} "
            f"(threshold {op} ×{fmt(e.threshold)}){assumed}{context}"
        )
    if e.operator.startswith("delta_"):
        return (
            f"{fmt(e.value)}{unit} vs baseline {fmt(e.baseline)} = {sign(e.compared)} "
            f"(threshold {op} {sign(e.threshold)}){assumed}{context}"
        )
    return f"{fmt(e.value)}{unit} (threshold {op} {fmt(e.threshold)}){assumed}{context}"


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))  # 100000 tokens, not 1e+05
    return f"{value:.4g}"


def _param(value: float | str) -> str:
    return value if isinstance(value, str) else fmt(value)


def sign(value: float | None) -> str:
    return "n/a" if value is None else ("+" if value >= 0 else "") + fmt(value)


def pick(t: Text, lang: str) -> str:
    return t.zh if lang == "zh" else t.en

"""The Diagnosis drawn like the seed's own trees (├─ │ └─), one mark per node, numbers on every line."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import promql_parser as pp

from diagnosd.findings.model import (
    CheckResult,
    Diagnosis,
    Evidence,
    FleetResult,
    NodeKind,
    RootCause,
    TargetDiagnosis,
    Verdict,
)
from diagnosd.render import units
from diagnosd.render.json import timestamp
from diagnosd.trees import families
from diagnosd.trees.model import CheckNode, Context, Text, Tree, walk

MARKS = {
    Verdict.MATCHED: "▲",
    Verdict.CLEAR: "·",
    Verdict.UNKNOWN: "?",
    Verdict.MANUAL: "☐",
    Verdict.SKIPPED: "–",
}
LEGEND = {
    "en": "▲ matched  · clear  ? unknown (could not look)  ☐ for a person  – not asked (parent clear)",
    "zh": "▲ 命中  · 排除  ? 未知（无法查看）  ☐ 需人工检查  – 未检查（上级未命中）",
}
# Every word of the frame, in both languages (rule texts come from the rules themselves).
WORDS: dict[str, dict[str, str]] = {
    "scope": {"en": "scope", "zh": "范围"},
    "note": {"en": "note", "zh": "提示"},
    "present": {"en": "SYMPTOM PRESENT", "zh": "症状存在"},
    "absent": {"en": "symptom not present", "zh": "无此症状"},
    "unknown_state": {"en": "symptom UNKNOWN", "zh": "症状未知"},
    "assumed": {"en": "assumed", "zh": "假设值"},
    "fix": {"en": "fix", "zh": "修复"},
    "caveat": {"en": "caveat", "zh": "注意"},
    "causes": {"en": "root causes, most likely first:", "zh": "根因（最可能的在前）："},
    "possible": {
        "en": "possible causes (the symptom itself could not be confirmed), most likely first:",
        "zh": "可能的根因（症状本身无法确认），最可能的在前：",
    },
    "no_cause": {
        "en": "no root cause found among the checks that could run; see ? and ☐ above",
        "zh": "能执行的检查中未找到根因；见上方 ? 与 ☐",
    },
    "no_targets": {
        "en": "no target in scope has data for this symptom (nothing could be looked at)",
        "zh": "范围内没有任何目标有此症状的数据（无法查看任何内容）",
    },
    "unknown": {"en": "unknown", "zh": "未知"},
    "could_not_look": {"en": "could not look", "zh": "无法查看"},
    "group_unknown": {"en": "some checks below could not be looked at", "zh": "下面有些检查无法查看"},
    "without": {"en": "without the symptom:", "zh": "无此症状的目标："},
    "unknown_brief": {"en": "symptom unknown, nothing matched:", "zh": "症状未知且无命中项的目标："},
    "verbose_hint": {
        "en": "(--verbose or verbose=true shows every target in full)",
        "zh": "（--verbose 或 verbose=true 显示每个目标的完整检查树）",
    },
    "checks_clear": {"en": "clear", "zh": "排除"},
    "checks_unknown": {"en": "unknown", "zh": "未知"},
    "would_explain": {"en": "would explain it, symptom not established", "zh": "可解释该症状，但症状未确认"},
    "unsettled": {
        "en": "not a root cause until these are checked (it may be their consequence):",
        "zh": "在检查以下各项之前不算根因（可能是它们的结果）：",
    },
    "unsettled_causes": {
        "en": "possible causes (each may be a consequence of a check that could not run):",
        "zh": "可能的根因（各自可能是某项无法执行的检查的结果）：",
    },
    "explained_by": {"en": "explained by", "zh": "由此解释："},
    "in_top_bucket": {"en": "top bucket", "zh": "最高桶"},
    "fleet": {
        "en": "fleet-wide (answers without target labels, judged once for the whole scope):",
        "zh": "全局（无目标标签的结果，对整个范围只判断一次）：",
    },
    "all": {"en": "all of", "zh": "同时满足"},
    "any": {"en": "any of", "zh": "满足其一"},
    "now": {"en": "now", "zh": "当前"},
}
SEVERITY = {
    "en": {"info": "info", "warning": "warning", "critical": "critical"},
    "zh": {"info": "严重程度：提示", "warning": "严重程度：警告", "critical": "严重程度：严重"},
}
REASONS = {
    "en": {
        "no_data": "no data",
        "metric_absent": "metric absent",
        "query_error": "query failed",
        "timeout": "query timed out",
        "zero_over_zero": "0/0",
        "low_traffic": "too little traffic",
        "no_baseline": "no baseline",
        "bad_value": "not a number",
        "infinite": "infinite value (division by zero)",
        "partial": "partial answer from Prometheus",
        "parent_not_matched": "parent not matched",
        "fleet_level": "fleet-level",
        "short_history": "history shorter than the window",
    },
    "zh": {
        "no_data": "无数据",
        "metric_absent": "指标不存在",
        "query_error": "查询失败",
        "timeout": "查询超时",
        "zero_over_zero": "0/0",
        "low_traffic": "流量过低",
        "no_baseline": "无基线数据",
        "bad_value": "取值不是数字",
        "infinite": "值为无穷（除以零）",
        "partial": "Prometheus 只返回了部分结果",
        "parent_not_matched": "上级未命中",
        "fleet_level": "全局指标",
        "short_history": "历史数据短于查询窗口",
    },
}
# The engine's details (English) and their Chinese: (pattern, replacement).
DETAILS_ZH: tuple[tuple[str, str], ...] = (
    (r"^no series of (.+) on this Prometheus$", r"Prometheus 上没有 \1 的序列"),
    (r"^no sample for this target \(absent metrics: (.+)\)$", r"该目标没有样本（不存在的指标：\1）"),
    (r"^no sample for this target$", "该目标没有样本"),
    (r"^label (\S+)=(.+) is not a number$", r"标签 \1=\2 不是数字"),
    (r"^the query gave NaN \(0/0, or no observations in the window\)$", "查询结果为 NaN（0/0，或窗口内没有观测值）"),
    (r"^only asked when (\S+) matched$", r"仅在 \1 命中时检查"),
    (r"^traffic unknown: no traffic sample for this target$", "流量未知：该目标没有流量样本"),
    (r"^traffic unknown: (.+)$", r"流量未知：\1"),
    (r"^traffic (\S+) below the floor (\S+)$", r"流量 \1 低于下限 \2"),
    (r"^baseline: (.+)$", r"基线：\1"),
    (r"^the answer has no target labels: see fleet-wide$", "结果没有目标标签：见“全局”一节"),
)
# Scope-wide notes of the evaluator (English) and their Chinese.
NOTES_ZH: tuple[tuple[str, str], ...] = (
    (
        r"^metric name discovery unsupported \((.+)\); names used as written$",
        r"后端不支持指标名发现（\1）；按原样使用指标名",
    ),
)
OPERATORS = {"above": ">", "below": "<", "ratio_above": ">", "ratio_below": "<", "delta_above": ">", "delta_below": "<"}


def render(d: Diagnosis, lang: str = "en", verbose: bool = False, tree: Tree | None = None) -> str:
    """The diagnosis for a person: targets with the symptom first and in full, the others one line each.

    `verbose` draws every target's whole tree; `tree` (the Tree diagnosed) names context values.
    """
    known = contexts(tree)
    lines = [f"{d.symptom} · {pick(d.title, lang)}  @ {timestamp(d.evaluated_at)}"]
    if d.scope:
        lines.append(label("scope", lang) + " ".join(f"{k}={v!r}" for k, v in d.scope.items()))
    lines.extend(label("note", lang) + note_text(note, lang) for note in d.notes)
    if not d.targets:
        lines.append(word("no_targets", lang))
    present = [t for t in d.targets if t.symptom_present is True]
    unknown = [t for t in d.targets if t.symptom_present is None]
    clear = [t for t in d.targets if t.symptom_present is False]
    fleet = len(d.targets) > 1
    if fleet:
        lines.append(summary(len(d.targets), len(present), len(clear), len(unknown), lang))
    # An unknown target that matched nothing carries only its reasons: one line, like the clear ones.
    brief_unknown = [t for t in unknown if fleet and not verbose and not _informative(t)]
    brief_clear = clear if fleet and not verbose else []
    for t in [*present, *(t for t in unknown if t not in brief_unknown), *(t for t in clear if t not in brief_clear)]:
        lines.append("")
        lines.extend(_target(t, lang, known))
    for heading, brief in (("unknown_brief", brief_unknown), ("without", brief_clear)):
        if brief:
            space = "" if lang == "zh" else " "
            lines += ["", f"{word(heading, lang)}{space}{pick(brief[0].detect.title, lang)}"]
            lines.extend(_one_line(t, lang) for t in brief)
    if brief_unknown or brief_clear:
        lines.append(word("verbose_hint", lang))
    if d.fleet:
        lines += ["", word("fleet", lang)]
        lines.extend(_fleet(f, lang, known) for f in d.fleet)
    lines += ["", LEGEND[lang]]
    return "\n".join(lines) + "\n"


def _fleet(f: FleetResult, lang: str, known: Mapping[str, Mapping[str, Context]]) -> str:
    """One fleet-level check: its mark, title and numbers; where it matched, its finding and fix."""
    line = f"{MARKS[f.check.verdict]} {pick(f.check.title, lang)}{_numbers(f.check, lang, known.get(f.check.id))}"
    if f.finding is not None:
        severity = SEVERITY[lang].get(str(f.finding.severity), str(f.finding.severity))
        line += f"\n   → {pick(f.finding.title, lang)} ({severity})"
        line += "".join(f"\n     {label('fix', lang)}{pick(r, lang)}" for r in f.finding.remediation)
    return line


def summary(total: int, present: int, clear: int, unknown: int, lang: str = "en") -> str:
    """1 of 8 targets has the symptom, 6 do not, 1 unknown."""
    if lang == "zh":
        return f"{total} 个目标中 {present} 个有此症状，{clear} 个没有，{unknown} 个未知"
    has = "has" if present == 1 else "have"
    does = "does" if clear == 1 else "do"
    return f"{present} of {total} targets {has} the symptom, {clear} {does} not, {unknown} unknown"


def _informative(t: TargetDiagnosis) -> bool:
    return bool(t.root_causes or t.possible_causes) or any(
        c.verdict is Verdict.MATCHED and c.kind is not NodeKind.GROUP for c in t.checks
    )


def _one_line(t: TargetDiagnosis, lang: str) -> str:
    name = " ".join(f"{k}={v}" for k, v in t.labels.items())
    line = f"  {MARKS[t.detect.verdict]} {name}{_numbers(t.detect, lang)}"
    if t.symptom_present is None:
        clear = len(t.by_verdict(Verdict.CLEAR))
        unknown = len(t.by_verdict(Verdict.UNKNOWN))
        line += f"  ({clear} {word('checks_clear', lang)}, {unknown} {word('checks_unknown', lang)})"
    return line


def _target(t: TargetDiagnosis, lang: str, known: Mapping[str, Mapping[str, Context]] | None = None) -> list[str]:
    known = known or {}
    name = " ".join(f"{k}={v}" for k, v in t.labels.items())
    state = {True: "present", False: "absent", None: "unknown_state"}[t.symptom_present]
    lines = [f"{name} — {label(state, lang)}{pick(t.detect.title, lang)}{_numbers(t.detect, lang)}"]
    if t.detect.evidence is not None:
        lines.extend(_conditions(t.detect.evidence, "    ", lang))
    shown = (*t.root_causes, *t.possible_causes, *t.consequences)
    lines.extend(_tree(t.checks, {c.check: c for c in shown}, lang, known))
    unsettled = [c for c in t.possible_causes if c.unsettled_by] if t.symptom_present else []
    if t.root_causes:
        lines.append(word("causes", lang))
        for rank, cause in enumerate(t.root_causes, 1):
            lines.append(f"  {rank}. {cause.cause} [{SEVERITY[lang][cause.severity]}] {pick(cause.title, lang)}")
            lines.extend(_consequences(cause, lang, "     "))
    if unsettled:
        lines.append(word("unsettled_causes", lang))
        for rank, cause in enumerate(unsettled, 1):
            lines.append(
                f"  {rank}. {cause.cause} [{SEVERITY[lang][cause.severity]}] {pick(cause.title, lang)}"
                f" — {word('unsettled', lang)} {', '.join(cause.unsettled_by)}"
            )
            lines.extend(_consequences(cause, lang, "     "))
    if t.possible_causes and not t.symptom_present:
        lines.append(word("possible", lang))
        for rank, cause in enumerate(t.possible_causes, 1):
            lines.append(
                f"  {rank}. {cause.cause} [{SEVERITY[lang][cause.severity]}] {pick(cause.title, lang)}"
                f" — {word('would_explain', lang)}"
            )
            lines.extend(_consequences(cause, lang, "     "))
    elif t.symptom_present is not False and not t.root_causes and not unsettled:
        lines.append(word("no_cause", lang))
    return lines


def _consequences(cause: RootCause, lang: str, indent: str, seen: set[str] | None = None) -> list[str]:
    """The matched causes this one explains, under it (each once): consequences, never root causes."""
    seen = set() if seen is None else seen
    lines: list[str] = []
    for x in cause.explains:
        if x.cause in seen:
            continue
        seen.add(x.cause)
        lines.append(
            f"{indent}↳ {x.cause} [{SEVERITY[lang][x.severity]}] {pick(x.title, lang)}: "
            f"{word('explained_by', lang)} {', '.join(x.explained_by)}"
        )
        lines.extend(_consequences(x, lang, indent + "  ", seen))
    return lines


def _tree(
    checks: Sequence[CheckResult],
    causes: Mapping[str, RootCause],
    lang: str,
    known: Mapping[str, Mapping[str, Context]] | None = None,
) -> list[str]:
    lines: list[str] = []
    for index, check in enumerate(checks):
        prefix = _prefix(checks, index)
        numbers = _numbers(check, lang, (known or {}).get(check.id))
        lines.append(f"{prefix}{MARKS[check.verdict]} {pick(check.title, lang)}{numbers}")
        inner = _continuation(checks, index) + ("│  " if not _last_sibling(checks, index) else "   ")
        inner += "│  " if _has_children(checks, index) else "   "
        if check.evidence is not None and check.verdict is not Verdict.SKIPPED:
            lines.extend(_conditions(check.evidence, inner, lang, (known or {}).get(check.id)))
        if check.kind is NodeKind.MANUAL and check.guidance:
            lines.append(f"{inner}{pick(check.guidance, lang)}")
        cause = causes.get(check.id)
        if cause is not None:
            lines.append(f"{inner}→ {pick(cause.title, lang)}")
            lines.extend(f"{inner}  {label('fix', lang)}{pick(r, lang)}" for r in cause.remediation)
            if cause.caveat:
                lines.append(f"{inner}  {label('caveat', lang)}{pick(cause.caveat, lang)}")
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


def _numbers(check: CheckResult, lang: str = "en", known: Mapping[str, Context] | None = None) -> str:
    e = check.evidence
    if check.kind is NodeKind.GROUP:
        return f"  [{word('group_unknown', lang)}]" if check.verdict is Verdict.UNKNOWN else ""
    if check.verdict is Verdict.UNKNOWN:
        if check.reason is None:
            return f"  [{label('unknown', lang)}{word('could_not_look', lang)}]"
        why = REASONS[lang].get(str(check.reason), str(check.reason).replace("_", " "))
        # Of an all / any, each condition's own line below says why.
        said = check.detail and not (e is not None and e.conditions)
        detail = f" — {detail_text(check.detail or '', lang)}" if said else ""
        return f"  [{label('unknown', lang)}{why}{detail}]"
    if check.verdict is Verdict.SKIPPED or e is None:
        return ""
    if e.conditions:
        return f"  [{word(e.combine or 'all', lang)}]"  # one line per condition follows
    return "  " + describe(e, lang, known)


def _conditions(e: Evidence, indent: str, lang: str, known: Mapping[str, Context] | None = None) -> list[str]:
    """The conditions of an all / any, one evidence line each (nested ones indented under theirs)."""
    lines: list[str] = []
    for c in e.conditions:
        verdict = c.verdict or Verdict.UNKNOWN
        title = pick(c.title, lang) if c.title else c.check
        if verdict is Verdict.UNKNOWN:
            why = REASONS[lang].get(str(c.reason), word("could_not_look", lang)) if c.reason else ""
            detail = f" — {detail_text(c.detail, lang)}" if c.detail and not c.conditions else ""
            numbers = f"  [{label('unknown', lang)}{why or word('could_not_look', lang)}{detail}]"
        elif c.conditions:
            numbers = f"  [{word(c.combine or 'all', lang)}]"
        else:
            numbers = "  " + describe(c, lang, known)
        lines.append(f"{indent}{MARKS[verdict]} {title}{numbers}")
        lines.extend(_conditions(c, indent + "   ", lang, known))
    return lines


def describe(e: Evidence, lang: str = "en", known: Mapping[str, Context] | None = None) -> str:
    """The numbers of one verdict with their units: 51 % (threshold > 90 %), 3.2k tokens vs baseline..."""
    if e.conditions:
        parts = (f"{pick(c.title, lang) if c.title else c.check}: {describe(c, lang, known)}" for c in e.conditions)
        return f"{word(e.combine or 'all', lang)}: " + "; ".join(parts)
    op = OPERATORS.get(e.operator, e.operator)
    assumed = ""
    if e.assumed:
        used = f"{word('assumed', lang)} {', '.join(f'{k}={_param(v)}' for k, v in e.assumed.items())}"
        assumed = f"  （{used}）" if lang == "zh" else f"  ({used})"
    extra = assumed + _context(e, lang, known)
    value = _value(e, lang)
    if units.unit_of(e.unit).kind == "bool" and not e.operator.startswith(("ratio_", "delta_")):
        return value + extra  # a yes/no check: yes or no, never 1 (threshold > 0.5)
    if e.operator.startswith("ratio_"):
        baseline, compared, limit = (
            units.quantity(e.baseline, e.unit, lang),
            units.factor(e.compared),
            units.factor(e.threshold),
        )
    elif e.operator.startswith("delta_"):
        baseline = units.quantity(e.baseline, e.unit, lang)
        compared, limit = _signed(e.compared, e.unit, lang), _signed(e.threshold, e.unit, lang)
    else:
        limit = units.quantity(e.threshold, e.unit, lang)
        return (f"{value}（阈值 {op} {limit}）" if lang == "zh" else f"{value} (threshold {op} {limit})") + extra
    if lang == "zh":
        how = "比值" if e.operator.startswith("ratio_") else "差值"
        return f"{value}，基线 {baseline}，{how} {compared}（阈值 {op} {limit}）{extra}"
    return f"{value} vs baseline {baseline} = {compared} (threshold {op} {limit}){extra}"


def _value(e: Evidence, lang: str) -> str:
    """The value, or "≥ bound (top bucket)" where a histogram quantile lies in the +Inf bucket.

    Sustained: the level held in `share` of the window, then the value now: "≥ 15 requests in
    80 % of 5m, now 18 requests".
    """
    value = _at_top(e.value, e.context.get(TOP_BUCKET), e.unit, lang) or units.quantity(e.value, e.unit, lang)
    if e.sustained_for is None or e.share is None:
        return value
    bound = "≤" if e.operator.endswith("below") else "≥"
    share, now = f"{e.share * 100:g} %", units.quantity(e.current, e.unit, lang)
    window = units.quantity(pp.parse_duration(e.sustained_for).total_seconds(), "s", lang)
    if lang == "zh":
        return f"{window} 内 {share} 的时间 {bound} {value}，{word('now', lang)} {now}"
    return f"{bound} {value} in {share} of {window}, {word('now', lang)} {now}"


def _at_top(value: float | None, top: float | None, unit: str | None, lang: str) -> str | None:
    """ "≥ 100k tokens (top bucket)" where a quantile reached the largest finite bucket bound (or +Inf)."""
    if value is None or math.isnan(value):
        return None
    if not (math.isinf(value) and value > 0) and (top is None or math.isnan(top) or value < top):
        return None
    bound = units.quantity(top, unit, lang) if top is not None else "∞"
    note = word("in_top_bucket", lang)
    return f"≥ {bound}（{note}）" if lang == "zh" else f"≥ {bound} ({note})"


def _signed(value: float | None, unit: str | None, lang: str) -> str:
    return "n/a" if value is None else units.quantity(value, unit, lang, signed=True)


def _context(e: Evidence, lang: str, known: Mapping[str, Context] | None) -> str:
    parts = []
    for key, value in e.context.items():
        if key == TOP_BUCKET or value is None:  # no value beside this check says nothing
            continue
        c = (known or {}).get(key)
        if c is not None:
            shown = _at_top(value, e.context.get(TOP_BUCKET), c.unit, lang) or units.quantity(value, c.unit, lang)
            parts.append(f"{label_of(c.title, lang)}{shown}")
        else:
            parts.append(f"{key}={units.quantity(value, _guess_unit(key), lang)}")
    return f"  [{'; '.join(parts)}]" if parts else ""


def _guess_unit(key: str) -> str | None:
    """A context's unit from its id, where the tree is not at hand (describe without contexts)."""
    for pattern, unit in CONTEXT_UNITS:
        if re.search(pattern, key):
            return unit
    return None


# Context id patterns and the unit they imply, used only without the tree.
CONTEXT_UNITS: tuple[tuple[str, str], ...] = (
    (r"tokens_per_second$|tokens_per_s$", "tokens/s"),
    (r"_per_second$|_qps$", "req/s"),
    (r"_seconds$|_delay$|latency", "s"),
    (r"_ratio$|_usage$|_share$", "ratio"),
    (r"tokens", "tokens"),
)
# A context of this id holds the largest finite bucket bound of a histogram_quantile check.
TOP_BUCKET = "top_bucket"


def contexts(tree: Tree | None) -> dict[str, dict[str, Context]]:
    """Each check's context values by id, with their titles and units."""
    if tree is None:
        return {}
    return {n.id: {c.id: c for c in n.context} for n, _ in walk(list(tree.nodes)) if isinstance(n, CheckNode)}


def fmt(value: float | None) -> str:
    """A bare number for a person: 13.2k, 0.0273, 8192, n/a."""
    return "n/a" if value is None else units.number(value)


def _param(value: float | str) -> str:
    return value if isinstance(value, str) else fmt(value)


def sign(value: float | None) -> str:
    return "n/a" if value is None else ("+" if value >= 0 else "") + fmt(value)


def word(key: str, lang: str) -> str:
    return WORDS[key]["zh" if lang == "zh" else "en"]


def label(key: str, lang: str) -> str:
    """A word of the frame followed by its colon: "fix: ", "修复："."""
    return word(key, lang) + ("：" if lang == "zh" else ": ")


def label_of(text: Text, lang: str) -> str:
    return pick(text, lang) + ("：" if lang == "zh" else ": ")


def note_text(note: str, lang: str) -> str:
    if lang != "zh":
        return note
    translated = families.translate(note)
    return translated if translated != note else _translate(note, NOTES_ZH)


def detail_text(detail: str, lang: str) -> str:
    return _translate(detail, DETAILS_ZH) if lang == "zh" else detail


def _translate(text: str, table: Sequence[tuple[str, str]]) -> str:
    for pattern, replacement in table:
        translated, count = re.subn(pattern, replacement, text)
        if count:
            return translated
    return text


def pick(t: Text, lang: str) -> str:
    return t.zh if lang == "zh" else t.en

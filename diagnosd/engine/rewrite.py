"""Rewrites a tree's PromQL for one Prometheus and one scope, through the parsed query.

Metric names become the spellings this Prometheus has; scope matchers are added to every vector
selector. Scope values never pass through text substitution: each gets a placeholder in the AST,
and the placeholder's quoted form is replaced by a PromQL string literal escaped here.

A name with several present spellings (vLLM 0.9.2-0.11 exposes old and new names side by side; a
client upgrade gives colon and underscore twins in one window) is never matched as one
`{__name__=~"a|b"}` selector inside `rate()` or `sum`: that fails on duplicate label sets or
counts the metric twice. Instead the smallest enclosing expression that holds one value per
target is evaluated once per spelling, newest first, and joined with `or`, which keeps the first
(newest) answer for every label set:

    sum by (pod) (rate(x[5m]))  ->  sum by (pod) (rate(new[5m])) or sum by (pod) (rate(old[5m]))

That expression grows from the selector through ranges, parentheses, unary minus, functions of
that one selector (rate, label_replace, histogram_quantile over the buckets, ...) and aggregations
that keep every target label. It stops at a binary operator (each operand is rewritten on its
own), at a subquery (the choice is made at each step inside it), at `scalar()` and at an
aggregation that drops a target label (a fleet-wide sum picks per series, so a fleet of mixed
releases is still counted once each). `absent()` and `absent_over_time()` keep the one regex
selector: a metric is absent only when every spelling is.

Scope matchers follow the topology (diagnosd/topology): a strict matcher (a label every series
carries, such as the isolation label of series tests or a `cluster`) goes on every selector; a
lenient one only on selectors of series that identify the target (engines, gateways, kube_pod_*,
dcgm-exporter), never on node, workload or autoscaler series (in a Prometheus Operator setup those
carry the exporter's own `namespace` and `pod`) nor inside an `@unscoped(...)` part.

dcgm-exporter and kube-state-metrics series may carry the pod's labels as `exported_namespace` /
`exported_pod` / `exported_container` (`honorLabels: false`): each of their selectors is evaluated
with those copied to the plain names, and scoped by them:

    max by (pod) (DCGM_X)  ->  max by (pod) (label_replace(...(DCGM_X{exported_pod!="", exported_pod=~"v|"}...)
                                             or DCGM_X{exported_pod="", pod=~"v|"})
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

import promql_parser as pp

from diagnosd.topology import JOIN_MARK, UNSCOPED_MARK, Level, exporter_labels_renamed, level_of
from diagnosd.topology.levels import RENAMED_LABELS

# Characters RE2 treats specially; everything else matches itself.
REGEX_SPECIAL = set(r"\.+*?()|[]{}^$")
REPLACEMENT_CHARACTER = "\ufffd"
# Functions over which the spellings are matched together by one regex selector.
ABSENCE = frozenset({"absent", "absent_over_time"})
# Functions the per-spelling choice does not climb past (their result is no vector to `or`).
OPAQUE = frozenset({"scalar"}) | ABSENCE
PICK = "__diagnosd_pick_{}__"
# Marks a selector of a family whose pod labels may be renamed `exported_*` (value: scoped or not).
NORM = "__diagnosd_norm__"


# A scope matcher's placeholder in a template, as printed (quoted) by the parser.
PLACEHOLDER = re.compile(r'"__diagnosd_scope_(\d+)__"')
# What a template depends on of a scope matcher: its label, whether it is strict, and whether a
# strict one names several values (`=~`, not `=`); never the values themselves. A lenient matcher
# is a regex however many values it names (it also lets through series without the label), so one
# template serves one alert's pod and a coalesced batch's pods.
Shape = tuple[str, bool, bool]


@dataclass(frozen=True)
class ScopeMatcher:
    label: str
    # The values the label may take: one as a diagnosis is asked; several for the targets of a
    # coalesced batch of alerts (any of them).
    values: tuple[str, ...]
    # Strict: the series must carry the label with one of the values. Lenient: one of them, or the
    # series lacks the label (GPU series have no model_name, node series no namespace; they must
    # still join in).
    strict: bool

    @property
    def shape(self) -> Shape:
        return self.label, self.strict, self.strict and len(self.values) > 1


def rewrite(
    text: str,
    names: Mapping[str, Sequence[str]],
    matchers: Sequence[ScopeMatcher],
    target: Sequence[str] = (),
) -> str:
    """`text` with names resolved and the scope matchers added.

    `names` maps a name to its present spellings, newest first; `target` lists the labels that
    identify one target (aggregations keeping them all are evaluated per spelling).
    """
    return fill(template(text, names, [m.shape for m in matchers], target), matchers)


def fill(template_: str, matchers: Sequence[ScopeMatcher]) -> str:
    """A template with each scope placeholder replaced by its matcher's values, quoted for PromQL.

    One pass: a value that reads like a placeholder is never replaced in turn."""
    if not matchers:
        return template_
    literals = [_literal(matcher) for matcher in matchers]
    return PLACEHOLDER.sub(lambda found: literals[int(found.group(1))], template_)


def template(
    text: str,
    names: Mapping[str, Sequence[str]],
    shapes: Sequence[Shape],
    target: Sequence[str] = (),
) -> str:
    """The rewritten query with a placeholder for each scope matcher's values (see `fill`).

    Parsing and rewriting is the costly part, and it depends on the scope's shape only: a caller
    remembers the template and fills it for every scope of that shape (each alert's pod)."""
    picks: dict[str, list[str]] = {}

    def visit(node: pp.Expr) -> pp.Expr | None:
        if not isinstance(node, pp.VectorSelector):
            return None
        written = list(node.matchers.matchers)
        extra = [m for m in written if m.name not in (UNSCOPED_MARK, JOIN_MARK)]
        scoped = (
            not any(m.name == UNSCOPED_MARK for m in written) and level_of(node.name or _name_of(node)) is Level.TARGET
        )
        renamed = exporter_labels_renamed(node.name or _name_of(node))
        spellings = list(names.get(node.name, ())) if node.name else []
        if len(spellings) == 1:
            node.name = spellings[0]
        elif len(spellings) > 1:
            # A placeholder name for now, one per selector: `_split` decides how far to fan out.
            node.name = PICK.format(len(picks))
            picks[node.name] = spellings
        for index, (label, strict, several) in enumerate(shapes):
            if strict:
                op = pp.MatchOp.Re if several else pp.MatchOp.Equal
                extra.append(pp.Matcher(op, label, f"__diagnosd_scope_{index}__"))
            elif scoped and not renamed:
                extra.append(pp.Matcher(pp.MatchOp.Re, label, f"__diagnosd_scope_{index}__"))
        if renamed:
            extra.append(pp.Matcher(pp.MatchOp.Equal, NORM, "scoped" if scoped else "unscoped"))
        node.matchers = pp.Matchers(extra)
        # promql-parser ignores a mutated node that is returned as is: hand back a fresh parse.
        return pp.parse(str(node))

    expr = pp.transform(pp.parse(text), pre_visit=visit)
    if picks:
        expr = _split(expr, picks, frozenset(target))
    lenient = [(index, label) for index, (label, strict, _) in enumerate(shapes) if not strict]
    return str(_normalise(expr, lenient))


def _split(expr: pp.Expr, picks: Mapping[str, list[str]], target: Set[str]) -> pp.Expr:
    """Fan every placeholder selector out into its spellings (see the module docstring)."""
    fan_out: dict[str, tuple[str, bool]] = {}  # printed subexpression -> (placeholder, parenthesise)
    stack: list[pp.Expr] = []

    def enter(node: pp.Expr) -> None:
        stack.append(node)
        if isinstance(node, pp.VectorSelector) and node.name is not None and node.name in picks:
            placeholder = node.name
            top = len(stack) - 1
            while top > 0 and _climbs(stack[top - 1], target):
                top -= 1
            parent = stack[top - 1] if top > 0 else None
            absence = isinstance(parent, pp.Call) and parent.func.name in ABSENCE
            # Absence over all spellings, or a bare range (which cannot be `or`-ed): one regex
            # selector, left as a placeholder here and matched as a union below.
            if not (absence or isinstance(stack[top], pp.MatrixSelector)):
                bare = parent is None or isinstance(parent, (pp.Call, pp.AggregateExpr, pp.ParenExpr))
                fan_out[str(stack[top])] = (placeholder, not bare)

    def leave(node: pp.Expr) -> None:
        stack.pop()

    pp.walk(expr, pre_visit=enter, post_visit=leave)

    def replace(node: pp.Expr) -> pp.Expr | None:
        plan = fan_out.get(str(node))
        if plan is None:
            return None
        placeholder, parens = plan
        alternatives = " or ".join(_respelled(str(node), placeholder, s) for s in picks[placeholder])
        return pp.parse(f"({alternatives})" if parens else alternatives)

    def leftover(node: pp.Expr) -> pp.Expr | None:
        if isinstance(node, pp.VectorSelector) and node.name is not None and node.name in picks:
            return _union(node, picks[node.name])
        return None

    # Whatever was not fanned out matches all its spellings in one regex selector.
    return pp.transform(pp.transform(expr, post_visit=replace), post_visit=leftover)


def _name_of(node: pp.VectorSelector) -> str | None:
    for matcher in node.matchers.matchers:
        if matcher.name == "__name__" and str(matcher.op) == "MatchOp.Equal":
            return str(matcher.value)
    return None


def _normalise(expr: pp.Expr, lenient: Sequence[tuple[int, str]]) -> pp.Expr:
    """Copy `exported_*` pod labels to the plain names on every NORM-marked selector (see above).

    The copy is made on the smallest instant vector holding the selector: the selector itself, or
    the function over its range (`rate(x[5m])`).
    """
    stack: list[pp.Expr] = []

    def enter(node: pp.Expr) -> None:
        stack.append(node)

    def replace(node: pp.Expr) -> pp.Expr | None:
        stack.pop()
        parent = stack[-1] if stack else None
        if isinstance(node, pp.VectorSelector) and not isinstance(parent, pp.MatrixSelector):
            anchor = _marked(node)
        elif isinstance(node, pp.Call):
            anchor = any(isinstance(a, pp.MatrixSelector) and _marked(a) for a in node.args)
        else:
            anchor = False
        return pp.parse(_normalised(str(node), lenient)) if anchor else None

    return pp.transform(expr, pre_visit=enter, post_visit=replace)


def _marked(node: pp.Expr) -> bool:
    found = False

    def visit(child: pp.Expr) -> None:
        nonlocal found
        if isinstance(child, pp.VectorSelector) and any(m.name == NORM for m in child.matchers.matchers):
            found = True

    pp.walk(node, pre_visit=visit)
    return found


def _normalised(text: str, lenient: Sequence[tuple[int, str]]) -> str:
    def variant(exported: bool | None) -> str:
        def visit(node: pp.Expr) -> pp.Expr | None:
            if not isinstance(node, pp.VectorSelector):
                return None
            marks = [m for m in node.matchers.matchers if m.name == NORM]
            if not marks:
                return None
            kept = [m for m in node.matchers.matchers if m.name != NORM]
            if exported is not None:
                kept.append(pp.Matcher(pp.MatchOp.NotEqual if exported else pp.MatchOp.Equal, "exported_pod", ""))
                for index, label in lenient:
                    name = f"exported_{label}" if exported and label in RENAMED_LABELS else label
                    kept.append(pp.Matcher(pp.MatchOp.Re, name, f"__diagnosd_scope_{index}__"))
            node.matchers = pp.Matchers(kept)
            return pp.parse(str(node))

        return str(pp.transform(pp.parse(text), pre_visit=visit))

    def copied(inner: str) -> str:
        for label in RENAMED_LABELS:
            inner = f'label_replace({inner}, "{label}", "$1", "exported_{label}", "(?s)(.+)")'
        return inner

    scoped = '"scoped"' in text and bool(lenient)
    if not scoped:
        return copied(variant(None))
    return f"({copied(variant(True))} or {variant(False)})"


def _climbs(parent: pp.Expr, target: Set[str]) -> bool:
    """Whether the per-spelling choice may move from a child up to `parent`."""
    if _selectors(parent) != 1:
        return False  # another metric in there: each operand on its own
    if isinstance(parent, (pp.MatrixSelector, pp.ParenExpr, pp.UnaryExpr)):
        return True
    if isinstance(parent, pp.Call):
        return parent.func.name not in OPAQUE
    if isinstance(parent, pp.AggregateExpr):
        modifier = parent.modifier
        if modifier is None:
            return False
        if modifier.type == pp.AggModifierType.By:
            return target <= set(modifier.labels)
        return not target & set(modifier.labels)
    return False


def _selectors(expr: pp.Expr) -> int:
    count = 0

    def visit(node: pp.Expr) -> None:
        nonlocal count
        if isinstance(node, pp.VectorSelector):
            count += 1

    pp.walk(expr, pre_visit=visit)
    return count


def _respelled(text: str, placeholder: str, spelling: str) -> str:
    def visit(node: pp.Expr) -> pp.Expr | None:
        if isinstance(node, pp.VectorSelector) and node.name == placeholder:
            node.name = spelling
            return pp.parse(str(node))
        return None

    return str(pp.transform(pp.parse(text), pre_visit=visit))


def _union(node: pp.VectorSelector, spellings: Sequence[str]) -> pp.Expr:
    node.name = None
    node.matchers = pp.Matchers([*node.matchers.matchers, pp.Matcher(pp.MatchOp.Re, "__name__", "|".join(spellings))])
    return pp.parse(str(node))


def strict_matcher(matcher: ScopeMatcher) -> str:
    """`label="value"` (several values: `label=~"a|b"`), quoted for PromQL (a strict matcher's)."""
    return f"{matcher.label}{'=~' if len(matcher.values) > 1 else '='}{_literal(matcher)}"


def _literal(matcher: ScopeMatcher) -> str:
    if matcher.strict and len(matcher.values) == 1:
        value = matcher.values[0]
    else:
        # A regex of the values (Prometheus anchors it); lenient: or the label missing (empty).
        value = "|".join(_regex_escape(v) for v in matcher.values) + ("" if matcher.strict else "|")
    # JSON's escapes (\" \\ \n \uXXXX) are a subset of PromQL's Go-style double-quoted strings.
    # U+FFFD is escaped too: Prometheus's lexer reads it as utf8.RuneError and refuses the whole
    # query ("invalid UTF-8 rune"), while the escape stands for the same, valid, character.
    return json.dumps(value, ensure_ascii=False).replace(REPLACEMENT_CHARACTER, "\\uFFFD")


def _regex_escape(value: str) -> str:
    return "".join("\\" + ch if ch in REGEX_SPECIAL else ch for ch in value)

"""Rewrites a tree's PromQL for one Prometheus and one scope, through the parsed query.

Metric names become the spellings this Prometheus has; scope matchers are added to every vector
selector. Scope values never pass through text substitution: each gets a placeholder in the AST,
and the placeholder's quoted form is replaced by a PromQL string literal escaped here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import promql_parser as pp

# Characters RE2 treats specially; everything else matches itself.
REGEX_SPECIAL = set(r"\.+*?()|[]{}^$")


@dataclass(frozen=True)
class ScopeMatcher:
    label: str
    value: str
    # Strict: the series must carry label=value. Lenient: equal, or the series lacks the label
    # (GPU series have no model_name, node series no namespace; they must still join in).
    strict: bool


def rewrite(text: str, names: Mapping[str, Sequence[str]], matchers: Sequence[ScopeMatcher]) -> str:
    """`text` with names resolved (name -> present spellings) and the scope matchers added."""
    literals: dict[str, str] = {}
    for index, matcher in enumerate(matchers):
        literals[f"__diagnosd_scope_{index}__"] = _literal(matcher)

    def visit(node: pp.Expr) -> pp.Expr | None:
        if not isinstance(node, pp.VectorSelector):
            return None
        extra = list(node.matchers.matchers)
        spellings = list(names.get(node.name, ())) if node.name else []
        if len(spellings) == 1:
            node.name = spellings[0]
        elif len(spellings) > 1:
            node.name = None
            extra.append(pp.Matcher(pp.MatchOp.Re, "__name__", "|".join(spellings)))
        for index, matcher in enumerate(matchers):
            op = pp.MatchOp.Equal if matcher.strict else pp.MatchOp.Re
            extra.append(pp.Matcher(op, matcher.label, f"__diagnosd_scope_{index}__"))
        node.matchers = pp.Matchers(extra)
        # promql-parser ignores a mutated node that is returned as is: hand back a fresh parse.
        return pp.parse(str(node))

    out = str(pp.transform(pp.parse(text), pre_visit=visit))
    for placeholder, literal in literals.items():
        out = out.replace(f'"{placeholder}"', literal)
    return out


def _literal(matcher: ScopeMatcher) -> str:
    value = matcher.value if matcher.strict else _regex_escape(matcher.value) + "|"
    # JSON's escapes (\" \\ \n \uXXXX) are a subset of PromQL's Go-style double-quoted strings.
    return json.dumps(value, ensure_ascii=False)


def _regex_escape(value: str) -> str:
    return "".join("\\" + ch if ch in REGEX_SPECIAL else ch for ch in value)

"""Scope values cannot change a query: they arrive as escaped literals inside matchers."""

from __future__ import annotations

import promql_parser as pp
import pytest

from diagnosd.engine.rewrite import ScopeMatcher, rewrite
from diagnosd.engine.scope import Scope
from diagnosd.errors import ScopeError

HOSTILE = ['"', "}", '"} or vector(1) #', "a\nb", "ünï\u2028cøde", "\\", "x=~.*", "$window", "'", "`"]


def selectors(text: str) -> list[tuple[str | None, dict[str, tuple[str, str]]]]:
    found: list[tuple[str | None, dict[str, tuple[str, str]]]] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            found.append((node.name, {m.name: (str(m.op), m.value) for m in node.matchers.matchers}))

    pp.walk(pp.parse(text), pre_visit=visit)
    return found


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_values(value: str) -> None:
    query = "sum by (pod) (rate(vllm:x_total[5m])) / on(pod) max by (pod) (DCGM_FI_DEV_GPU_UTIL)"
    out = rewrite(query, {}, [ScopeMatcher("pod", value, strict=True)])
    found = selectors(out)
    assert [name for name, _ in found] == ["vllm:x_total", "DCGM_FI_DEV_GPU_UTIL"]
    assert all(m["pod"] == ("MatchOp.Equal", value) for _, m in found)
    # The shape of the query is untouched: the same functions and nothing else.
    assert calls(out) == ["rate"]


def calls(text: str) -> list[str]:
    found: list[str] = []
    pp.walk(pp.parse(text), pre_visit=lambda n: found.append(n.func.name) if isinstance(n, pp.Call) else None)
    return found


@pytest.mark.parametrize("value", HOSTILE)
def test_lenient_matchers_match_the_literal_value_or_absence(value: str) -> None:
    out = rewrite("max(up)", {}, [ScopeMatcher("model_name", value, strict=False)])
    ((_, matchers),) = selectors(out)
    op, regex = matchers["model_name"]
    assert op.startswith("MatchOp.Re")
    import re

    assert re.fullmatch(regex, value)
    assert re.fullmatch(regex, "")
    assert not re.fullmatch(regex, value + "x")


def test_names_are_resolved_to_present_spellings() -> None:
    out = rewrite(
        "rate(vllm:a_total[5m]) + vllm:b", {"vllm:a_total": ["vllm_a_total"], "vllm:b": ["vllm:b", "vllm_b"]}, []
    )
    assert selectors(out) == [
        ("vllm_a_total", {}),
        (None, {"__name__": ("MatchOp.Re", "vllm:b|vllm_b")}),
    ]


@pytest.mark.parametrize("name", ["", "1pod", "po-d", "__name__", "pod}", 'a"b'])
def test_bad_label_names_are_refused(name: str) -> None:
    with pytest.raises(ScopeError):
        Scope.of({name: "x"})


def test_scope_parse_keeps_equals_in_values_and_refuses_repeats() -> None:
    assert Scope.parse(["pod=a=b"]).as_dict() == {"pod": "a=b"}
    with pytest.raises(ScopeError, match="given twice"):
        Scope.parse(["pod=a", "pod=b"])
    with pytest.raises(ScopeError, match="LABEL=VALUE"):
        Scope.parse(["pod"])

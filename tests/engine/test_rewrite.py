"""The rewrite of a tree's query: scope values cannot change it (they arrive as escaped literals
inside matchers), and each present spelling of a metric is evaluated on its own, newest first."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

import promql_parser as pp
import pytest

from diagnosd.engine.evaluator import Evaluator
from diagnosd.engine.rewrite import ScopeMatcher, fill, rewrite, template
from diagnosd.engine.scope import Scope
from diagnosd.errors import ScopeError
from diagnosd.promlocal.openmetrics import Series
from diagnosd.trees.aliases import Aliases, AliasGroup
from tests.conftest import StartPrometheus
from tests.engine.fakes import FakeSource

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
    out = rewrite(query, {}, [ScopeMatcher("pod", (value,), strict=True)])
    found = selectors(out)
    assert [name for name, _ in found] == ["vllm:x_total", "DCGM_FI_DEV_GPU_UTIL"]
    assert all(m["pod"] == ("MatchOp.Equal", value) for _, m in found)
    # The shape of the query is untouched: the same functions and nothing else (dcgm-exporter's
    # selectors only gain the copy of `exported_*` pod labels).
    assert [c for c in calls(out) if c != "label_replace"] == ["rate"]


def calls(text: str) -> list[str]:
    found: list[str] = []
    pp.walk(pp.parse(text), pre_visit=lambda n: found.append(n.func.name) if isinstance(n, pp.Call) else None)
    return found


@pytest.mark.parametrize("value", HOSTILE)
def test_lenient_matchers_match_the_literal_value_or_absence(value: str) -> None:
    out = rewrite("max(up)", {}, [ScopeMatcher("model_name", (value,), strict=False)])
    ((_, matchers),) = selectors(out)
    op, regex = matchers["model_name"]
    assert op.startswith("MatchOp.Re")
    import re

    assert re.fullmatch(regex, value)
    assert re.fullmatch(regex, "")
    assert not re.fullmatch(regex, value + "x")


def test_names_are_resolved_to_present_spellings() -> None:
    out = rewrite("rate(vllm:a_total[5m]) + vllm:b", {"vllm:a_total": ["vllm_a_total"], "vllm:b": ["vllm:b"]}, [])
    assert selectors(out) == [("vllm_a_total", {}), ("vllm:b", {})]
    # One present spelling: the query keeps its shape, only the name changes.
    assert out == str(pp.parse("rate(vllm_a_total[5m]) + vllm:b"))


# Two spellings of one metric on one target (vLLM 0.9.2-0.11 old and new names, colon and
# underscore twins after a client upgrade): each is evaluated on its own, newest first, and `or`
# keeps the newest answer per label set. Never `{__name__=~"new|old"}` inside rate() or sum.
TWO = {"x": ["new", "old"], "y": ["y_new", "y_old"], "one": ["one"]}
TARGET = ["namespace", "pod"]


def same(out: str, expected: str) -> None:
    assert out == str(pp.parse(expected)), f"\n got: {out}\nwant: {pp.parse(expected)}"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # An aggregation that keeps the target labels: one answer per target and spelling.
        (
            "sum by (namespace, pod) (rate(x[5m]))",
            "sum by (namespace, pod) (rate(new[5m])) or sum by (namespace, pod) (rate(old[5m]))",
        ),
        ("max without (engine) (x)", "max without (engine) (new) or max without (engine) (old)"),
        # A gauge or a rate on its own: one answer per series and spelling.
        ("x", "new or old"),
        ("rate(x[5m])", "rate(new[5m]) or rate(old[5m])"),
        # Each operand of a binary expression on its own; precedence kept with parentheses.
        (
            "sum by (namespace, pod) (rate(x[5m])) / sum by (namespace, pod) (rate(y[5m])) > 0.5",
            "(sum by (namespace, pod) (rate(new[5m])) or sum by (namespace, pod) (rate(old[5m])))"
            " / (sum by (namespace, pod) (rate(y_new[5m])) or sum by (namespace, pod) (rate(y_old[5m]))) > 0.5",
        ),
        (
            "max by (namespace, pod) (x) * on (pod) one",
            "(max by (namespace, pod) (new) or max by (namespace, pod) (old)) * on (pod) one",
        ),
        # The quantile per spelling: buckets (`le`) of two spellings are never mixed in one histogram.
        (
            "histogram_quantile(0.9, sum by (namespace, pod, le) (rate(x[5m])))",
            "histogram_quantile(0.9, sum by (namespace, pod, le) (rate(new[5m])))"
            " or histogram_quantile(0.9, sum by (namespace, pod, le) (rate(old[5m])))",
        ),
        # A tree's own `or` between engines: each operand on its own, inside the aggregation.
        (
            "histogram_quantile(0.9, sum by (namespace, pod, le) (rate(x[5m]) or rate(one[5m])))",
            "histogram_quantile(0.9, sum by (namespace, pod, le) ((rate(new[5m]) or rate(old[5m])) or rate(one[5m])))",
        ),
        (
            'label_replace(max by (namespace, pod) (x), "gpu", "$1", "pod", "(.*)")',
            'label_replace(max by (namespace, pod) (new), "gpu", "$1", "pod", "(.*)")'
            ' or label_replace(max by (namespace, pod) (old), "gpu", "$1", "pod", "(.*)")',
        ),
        # An aggregation that drops a target label sums per series: pods on different releases
        # each count once.
        ("sum by (namespace) (rate(x[5m]))", "sum by (namespace) (rate(new[5m]) or rate(old[5m]))"),
        ("max(x)", "max(new or old)"),
        ("topk(1, x)", "topk(1, new or old)"),
        # A subquery chooses at every step inside it; offsets and @ stay on every selector.
        (
            "max_over_time(sum by (namespace, pod) (rate(x[5m] offset 1h))[1h:1m])",
            "max_over_time((sum by (namespace, pod) (rate(new[5m] offset 1h))"
            " or sum by (namespace, pod) (rate(old[5m] offset 1h)))[1h:1m])",
        ),
        ("-avg_over_time(x[5m] @ 100)", "-avg_over_time(new[5m] @ 100) or -avg_over_time(old[5m] @ 100)"),
        (
            "scalar(max by (namespace, pod) (x))",
            "scalar(max by (namespace, pod) (new) or max by (namespace, pod) (old))",
        ),
        # Absent only when every spelling is; a bare range cannot be `or`-ed.
        ("absent(x)", 'absent({__name__=~"new|old"})'),
        ("absent_over_time(x[5m])", 'absent_over_time({__name__=~"new|old"}[5m])'),
        ("x[5m]", '{__name__=~"new|old"}[5m]'),
        ("quantile_over_time(scalar(one), x[5m])", 'quantile_over_time(scalar(one), {__name__=~"new|old"}[5m])'),
    ],
)
def test_each_spelling_is_evaluated_on_its_own_newest_first(query: str, expected: str) -> None:
    same(rewrite(query, TWO, [], TARGET), expected)


def test_every_present_spelling_in_order() -> None:
    names = {"x": ["vllm:new", "vllm_new", "vllm:old", "vllm_old"]}
    out = rewrite("max by (namespace, pod) (x)", names, [], TARGET)
    assert [name for name, _ in selectors(out)] == names["x"]
    assert out.count(" or ") == 3


@pytest.mark.parametrize("value", HOSTILE)
def test_scope_matchers_reach_every_spelling(value: str) -> None:
    query = "sum by (namespace, pod) (rate(x[5m])) / on (pod) max by (namespace, pod) (y) + absent(x)"
    out = rewrite(
        query, TWO, [ScopeMatcher("pod", (value,), strict=True), ScopeMatcher("model_name", (value,), strict=False)]
    )
    found = selectors(out)
    assert [name for name, _ in found] == ["new", "old", "y_new", "y_old", None]
    assert all(m["pod"] == ("MatchOp.Equal", value) for _, m in found)
    assert all(m["model_name"][0].startswith("MatchOp.Re") for _, m in found)
    assert calls(out) == ["rate", "rate", "absent"]


@pytest.mark.parametrize("strict", [True, False])
def test_several_values_match_any_of_them_and_nothing_else(strict: bool) -> None:
    values = tuple(HOSTILE)
    out = rewrite("max by (pod) (vllm:x)", {}, [ScopeMatcher("pod", values, strict=strict)])
    ((_, matchers),) = selectors(out)
    op, regex = matchers["pod"]
    assert op.startswith("MatchOp.Re")
    import re

    assert all(re.fullmatch(regex, value) for value in values)
    assert bool(re.fullmatch(regex, "")) is not strict  # lenient: or the label missing
    assert not re.fullmatch(regex, "a")
    assert not re.fullmatch(regex, values[2] + values[3])


def test_a_value_that_reads_like_a_placeholder_is_never_replaced_in_turn() -> None:
    query = "max by (pod) (vllm:x)"
    matchers = [ScopeMatcher("pod", ("__diagnosd_scope_1__",), strict=True), ScopeMatcher("zone", ("z",), strict=True)]
    ((_, found),) = selectors(rewrite(query, {}, matchers))
    assert found["pod"] == ("MatchOp.Equal", "__diagnosd_scope_1__")
    assert found["zone"] == ("MatchOp.Equal", "z")


def test_one_template_serves_every_scope_of_its_shape() -> None:
    query = "sum by (pod) (rate(vllm:x_total[5m])) / on(pod) max by (pod) (DCGM_FI_DEV_GPU_UTIL)"
    shaped = template(query, {}, [("pod", False, False), ("cluster", True, False)])
    assert "__diagnosd_scope_0__" in shaped
    assert "__diagnosd_scope_1__" in shaped
    for pod in ("vllm-0", "vllm-1", '"} or vector(1)'):
        matchers = [ScopeMatcher("pod", (pod,), strict=False), ScopeMatcher("cluster", ("east",), strict=True)]
        assert fill(shaped, matchers) == rewrite(query, {}, matchers)


def test_a_scope_among_values_keeps_one_value_as_a_pair_and_sorts_the_rest() -> None:
    scope = Scope.among({"pod": ["b", "a", "b"], "namespace": ["prod"]})
    assert scope.as_dict() == {"namespace": "prod"}
    assert scope.choices == (("pod", ("a", "b")),)
    assert scope.values() == [("namespace", ("prod",)), ("pod", ("a", "b"))]
    assert Scope.among({"pod": ["a"]}) == Scope.of({"pod": "a"})
    with pytest.raises(ScopeError, match="no value"):
        Scope.among({"pod": []})
    with pytest.raises(ScopeError, match="longer than 1024 characters"):
        Scope.among({"pod": ["a", "x" * 1025]})


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
    assert Scope.parse(["pod=" + "x" * 1024]).as_dict() == {"pod": "x" * 1024}
    with pytest.raises(ScopeError, match="longer than 1024 characters"):  # the CLI and the API alike
        Scope.parse(["pod=" + "x" * 1025])


def test_the_newest_spelling_comes_first_whatever_the_tree_writes() -> None:
    aliases = Aliases([AliasGroup(names=["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"], note="rename")])
    assert aliases.newest_first("vllm:gpu_cache_usage_perc") == (
        "vllm:kv_cache_usage_perc",
        "vllm_kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm_gpu_cache_usage_perc",
    )
    evaluator = Evaluator(FakeSource(), aliases)
    found = {
        "vllm:gpu_cache_usage_perc": [
            "vllm:gpu_cache_usage_perc",
            "vllm_gpu_cache_usage_perc",
            "vllm:kv_cache_usage_perc",
        ]
    }
    resolved = evaluator._resolve("max by (namespace, pod) (vllm:gpu_cache_usage_perc)", found, [], TARGET)
    assert [name for name, _ in selectors(resolved.query)] == [
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm_gpu_cache_usage_perc",
    ]


def test_a_real_prometheus_counts_coexisting_spellings_once(start_prometheus: StartPrometheus) -> None:
    """Both vLLM 0.10 KV names on one pod, and a counter whose exporter restarted with a new client
    (underscore name ends, colon name starts) inside the rate window."""
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    pod = {"namespace": "prod", "pod": "vllm-0"}
    steps = range(41)  # 10 minutes every 15 s
    series = [
        Series("vllm:kv_cache_usage_perc", pod, [(start + 15 * i, 0.9) for i in steps]),
        Series("vllm:gpu_cache_usage_perc", pod, [(start + 15 * i, 0.9) for i in steps]),
        Series("vllm_prefix_cache_queries_total", pod, [(start + 15 * i, 150.0 * i) for i in range(20)]),
        Series("vllm:prefix_cache_queries_total", pod, [(start + 15 * i, 300.0 * (i - 20)) for i in range(20, 41)]),
    ]
    prom = start_prometheus(series)
    at = start + 600
    kv = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]
    queries = ["vllm:prefix_cache_queries_total", "vllm_prefix_cache_queries_total"]

    def value(query: str) -> float:
        url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": at})
        with urllib.request.urlopen(url, timeout=10) as response:
            (sample,) = json.load(response)["data"]["result"]
        return float(sample["value"][1])

    # The trap: one regex selector sums both names (0.9 read as 1.8) or fails inside a function.
    assert value('sum by (namespace, pod) ({__name__=~"vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc"})') == 1.8
    with pytest.raises(urllib.error.HTTPError):  # "vector cannot contain metrics with the same labelset"
        value('rate({__name__=~"vllm:prefix_cache_queries_total|vllm_prefix_cache_queries_total"}[10m])')
    names = {"kv": kv, "q": queries}
    assert value(rewrite("sum by (namespace, pod) (kv)", names, [], TARGET)) == 0.9
    assert value(rewrite("max by (namespace, pod) (avg_over_time(kv[5m])) * 100", names, [], TARGET)) == 90
    # The newest spelling's own rate (the new process, 20/s), decided, never the two added up.
    rate = value(rewrite("sum by (namespace, pod) (rate(q[10m]))", names, [], TARGET))
    assert rate == value("sum by (namespace, pod) (rate(vllm:prefix_cache_queries_total[10m]))")
    assert 9 < rate < 21
    ratio = value(
        rewrite("sum by (namespace, pod) (rate(q[10m])) / sum by (namespace, pod) (rate(q[10m]))", names, [], TARGET)
    )
    assert ratio == 1

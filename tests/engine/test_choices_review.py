"""Review of multi-valued scopes (coalesced storms): escaping for RE2, template fill and its cache,
and whether a target's answer in a batch equals its answer alone."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from diagnosd.daemon.alertmanager.coalesce import BatchKey, batch_key, part
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.engine.evaluator import Evaluator, _resolved
from diagnosd.engine.rewrite import ScopeMatcher, fill, rewrite, strict_matcher, template
from diagnosd.engine.scope import MAX_CHOICES, Scope, covering
from diagnosd.promlocal.openmetrics import Series
from tests.findings.builders import clear, diagnosis

TARGET = ["namespace", "pod"]
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
AT = START + 600
STEPS = range(41)
RECEIVED = datetime(2026, 1, 1, 0, 10, 1, tzinfo=UTC)

# Values RE2 would read as syntax, or that Prometheus's lexer handles specially.
CHOSEN = ["a.b", "a|b", "x\ny", "ünï\u2028", "q\ufffdr", "c\\d", '"q"', "(p)", "[z]", "^$", "s+*?{2}"]
# Values a badly escaped regex of CHOSEN would also match.
DECOYS = ["axb", "a", "b", "qr", "c\\\\d", "p", "z", "", "ss"]


def matchers_of(scope: Scope, strict: frozenset[str] = frozenset()) -> list[ScopeMatcher]:
    """The scope's matchers exactly as the evaluator builds them."""
    return Evaluator(None, strict_labels=strict)._matchers(None, scope)  # type: ignore[arg-type]


def points(value: float) -> list[tuple[float, float]]:
    return [(START + 15 * i, value) for i in STEPS]


def ask(url: str, query: str) -> list[dict[str, Any]]:
    form = urllib.parse.urlencode({"query": query, "time": AT}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=form, timeout=10) as response:
        return json.load(response)["data"]["result"]


def by_pod(url: str, query: str) -> dict[str | None, float]:
    return {s["metric"].get("pod"): float(s["value"][1]) for s in ask(url, query)}


# --- (1) escaping, pure ---------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False])
def test_the_regex_of_several_values_matches_them_and_no_decoy(strict: bool) -> None:
    (matcher,) = matchers_of(Scope.among({"pod": CHOSEN}), frozenset({"pod"}) if strict else frozenset())
    literal = fill('"__diagnosd_scope_0__"', [matcher])
    regex = json.loads(literal.replace("\\uFFFD", "\ufffd"))
    # Prometheus anchors a matcher's regex as ^(?s:...)$.
    anchored = re.compile(f"^(?s:{regex})$")
    assert all(anchored.match(v) for v in CHOSEN)
    assert [d for d in DECOYS if anchored.match(d)] == ([] if strict else [""])
    assert "\ufffd" not in literal  # Prometheus's lexer refuses the raw character


# --- (1)+(5) escaping and names discovery against a real Prometheus ------------------------------------


def test_a_real_prometheus_reads_exactly_the_chosen_values(start_prometheus: Any) -> None:
    series = [Series("vllm:num_requests_running", {"namespace": "prod", "pod": v}, points(1.0)) for v in CHOSEN]
    series += [Series("vllm:num_requests_running", {"namespace": "prod", "pod": v}, points(1.0)) for v in DECOYS if v]
    series.append(Series("vllm:num_requests_running", {"namespace": "prod"}, points(1.0)))  # no pod
    series += [
        Series("DCGM_FI_DEV_GPU_UTIL", {"namespace": "monitoring", "pod": "dcgm-x", "exported_pod": v}, points(50.0))
        for v in ["a.b", "a|b", "ünï\u2028", "axb"]
    ]
    prom = start_prometheus(series)
    scope = Scope.among({"namespace": ["prod"], "pod": CHOSEN})

    lenient = matchers_of(scope)
    got = by_pod(prom.url, rewrite("sum by (pod) (vllm:num_requests_running)", {}, lenient, TARGET))
    assert set(got) == {*CHOSEN, None}  # and the series without the label
    gpu = by_pod(prom.url, rewrite("max by (pod) (DCGM_FI_DEV_GPU_UTIL)", {}, lenient, TARGET))
    assert set(gpu) == {"a.b", "a|b", "ünï\u2028"}  # exported_pod copied to pod, scoped by it

    strict = matchers_of(scope, frozenset({"pod"}))
    got = by_pod(prom.url, rewrite("sum by (pod) (vllm:num_requests_running)", {}, strict, TARGET))
    assert set(got) == set(CHOSEN)

    # Names discovery: `where` as the evaluator builds it from strict multi-valued matchers.
    where = [strict_matcher(m) for m in strict if m.strict]
    selector = "{" + ", ".join(['__name__=~"vllm:num_requests_running|DCGM_FI_DEV_GPU_UTIL"', *where]) + "}"
    params = urllib.parse.urlencode({"match[]": selector, "start": START, "end": AT})
    with urllib.request.urlopen(f"{prom.url}/api/v1/label/__name__/values?{params}", timeout=10) as response:
        assert json.load(response)["data"] == ["vllm:num_requests_running"]


def test_an_exported_pod_with_a_newline_is_copied_to_pod(start_prometheus: Any) -> None:
    """Pre-existing (rewrite._normalised `copied`), not this commit: label_replace's "(.+)" does not
    match a newline, so the series matched by exported_pod keeps the exporter's own pod."""
    labels = {"namespace": "monitoring", "pod": "dcgm-x", "exported_pod": "x\ny"}
    prom = start_prometheus([Series("DCGM_FI_DEV_GPU_UTIL", labels, points(50.0))])
    matchers = matchers_of(Scope.among({"pod": ["x\ny", "vllm-1"]}))
    assert set(by_pod(prom.url, rewrite("max by (pod) (DCGM_FI_DEV_GPU_UTIL)", {}, matchers, TARGET))) == {"x\ny"}


# --- (2) templates, fill and the cache ------------------------------------------------------------------


def test_a_cached_template_is_filled_with_each_scopes_own_values() -> None:
    evaluator = Evaluator(None)  # type: ignore[arg-type]
    text = "sum by (namespace, pod) (vllm:num_requests_running) / max by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL)"
    _resolved.cache_clear()
    for pods in (["vllm-1", "vllm-7"], ["vllm-2", "vllm-3"], ["vllm-1"], ["__diagnosd_scope_1__", "x"]):
        matchers = matchers_of(Scope.among({"namespace": ["prod"], "pod": pods}))
        got = evaluator._resolve(text, {}, matchers, TARGET).query
        assert got == rewrite(text, {}, matchers, TARGET)
        for other in {"vllm-1", "vllm-2", "vllm-3", "vllm-7"} - set(pods):
            assert other not in got
    # Lenient matchers are regexes however many values they name: one template for one pod and several.
    assert _resolved.cache_info().misses == 1
    strict = Evaluator(None, strict_labels=["pod"])  # type: ignore[arg-type]
    for pods in (["vllm-1", "vllm-7"], ["vllm-2"], ["vllm-3"]):
        matchers = [ScopeMatcher("pod", tuple(pods), True)]
        assert strict._resolve(text, {}, matchers, TARGET).query == rewrite(text, {}, matchers, TARGET)
    assert _resolved.cache_info().misses == 3  # strict: `=` for one value, `=~` for several


@pytest.mark.parametrize("several", [False, True])
def test_strictness_and_multiplicity_are_both_in_the_shape(several: bool) -> None:
    pods = ("vllm-1", "vllm-7") if several else ("vllm-1",)
    text = "max by (pod) (DCGM_FI_DEV_GPU_UTIL) + on (pod) node_load1"
    for strict in (True, False):
        m = ScopeMatcher("pod", pods, strict)
        assert fill(template(text, {}, [m.shape], TARGET), [m]) == rewrite(text, {}, [m], TARGET)
    strict_m, lenient_m = ScopeMatcher("pod", pods, True), ScopeMatcher("pod", pods, False)
    assert strict_m.shape != lenient_m.shape
    # a strict template filled with a lenient matcher would be wrong: they must never share a slot
    assert template(text, {}, [strict_m.shape], TARGET) != template(text, {}, [lenient_m.shape], TARGET)


# --- (3) a target's answer in a batch vs alone ------------------------------------------------------


def test_a_pod_serving_two_models_is_judged_in_its_batch_as_alone(start_prometheus: Any) -> None:
    """vllm-1 serves llama and mistral, vllm-7 mistral; alerts on (vllm-1, llama), (vllm-1,
    mistral) and (vllm-7, mistral). Were (vllm-1, llama) and (vllm-7, mistral) one batch, its scope
    (pod any of both, model_name any of both) would read vllm-1's mistral series into its llama
    alert's `sum by (namespace, pod)`: model_name is no target label, so alerts on two models are
    two batches, and in each a target reads what it reads alone."""
    prod = {"namespace": "prod"}
    series = [
        Series("vllm:num_requests_running", {**prod, "pod": "vllm-1", "model_name": "llama"}, points(1.0)),
        Series("vllm:num_requests_running", {**prod, "pod": "vllm-1", "model_name": "mistral"}, points(10.0)),
        Series("vllm:num_requests_running", {**prod, "pod": "vllm-7", "model_name": "mistral"}, points(5.0)),
    ]
    prom = start_prometheus(series)
    alerts = [
        {"namespace": "prod", "pod": "vllm-1", "model_name": "llama"},
        {"namespace": "prod", "pod": "vllm-1", "model_name": "mistral"},
        {"namespace": "prod", "pod": "vllm-7", "model_name": "mistral"},
    ]
    batches: dict[BatchKey, list[dict[str, str]]] = {}
    for n, alert in enumerate(alerts):
        job = AlertJob(f"fp-{n}", "firing", "2026-01-01T00:00:00+00:00", "A", "queue_backlog", alert, RECEIVED)
        batches.setdefault(batch_key(job, timedelta(seconds=2), (), TARGET), []).append(alert)
    assert sorted(len(b) for b in batches.values()) == [1, 2]
    query = "sum by (namespace, pod) (vllm:num_requests_running)"
    for members in batches.values():
        batch = by_pod(prom.url, rewrite(query, {}, matchers_of(Scope.among(covering(members))), TARGET))
        for alert in members:
            alone = by_pod(prom.url, rewrite(query, {}, matchers_of(Scope.of(alert)), TARGET))
            assert batch[alert["pod"]] == alone[alert["pod"]], alert


# --- (4) the cap ------------------------------------------------------------------------------------


def test_over_the_cap_each_alert_still_takes_only_its_own_target() -> None:
    scopes = [{"namespace": "prod", "pod": f"vllm-{n}"} for n in range(MAX_CHOICES + 1)]
    covered = covering(scopes)
    assert covered == {"namespace": {"prod"}}
    scope = Scope.among(covered)
    assert scope.values() == [("namespace", ("prod",))]
    wide = diagnosis(*(clear(f"vllm-{n}") for n in range(MAX_CHOICES + 5)))
    for alert in scopes[:3]:
        (own,) = part(wide, alert).targets
        assert own.labels["pod"] == alert["pod"]

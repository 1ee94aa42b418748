"""The Prometheus client at its boundary: answers, errors, timeouts, retries and auth headers."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest
import respx

from diagnosd.errors import QueryRejected, SourceProtocolError, SourceTimeout, SourceUnavailable
from diagnosd.sources import PrometheusConfig, PrometheusSource

URL = "http://prom.test:9090"
AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def source(handler: Callable[[httpx.Request], httpx.Response], **config: object) -> PrometheusSource:
    cfg = PrometheusConfig(url=URL, backoff=0.0, **config)  # type: ignore[arg-type]
    return PrometheusSource(cfg, httpx.AsyncClient(base_url=URL, transport=httpx.MockTransport(handler)))


def vector(*items: tuple[dict[str, str], str]) -> httpx.Response:
    result = [{"metric": m, "value": [1.0, v]} for m, v in items]
    return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})


async def test_query_posts_promql_and_time_and_parses_special_values() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "NaN"), ({"pod": "c"}, "+Inf"))

    samples = await source(handler).query('up{pod="x"}', AT)
    assert [(s.labels["pod"], s.value) for s in samples[::2]] == [("a", 1.5), ("c", math.inf)]
    assert math.isnan(samples[1].value)
    form = dict(httpx.QueryParams(seen[0].content.decode()))
    assert form == {"query": 'up{pod="x"}', "time": f"{AT.timestamp():.3f}", "timeout": "10s"}
    assert seen[0].method == "POST"
    assert seen[0].url.path == "/api/v1/query"


async def test_scalar_result_is_one_unlabelled_sample() -> None:
    body = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}}
    (sample,) = await source(lambda r: httpx.Response(200, json=body)).query("3", AT)
    assert (dict(sample.labels), sample.value) == ({}, 3.0)


async def test_bad_query_is_rejected_with_prometheus_message_and_not_retried() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "1:4: parse error"})

    with pytest.raises(QueryRejected) as caught:
        await source(handler).query("up{", AT)
    assert caught.value.detail == "HTTP 400 bad_data: 1:4: parse error"
    assert caught.value.query == "up{"
    assert len(calls) == 1


async def test_transient_5xx_is_retried_then_succeeds() -> None:
    replies = iter([httpx.Response(503, text="overloaded"), vector(({"pod": "a"}, "1"))])
    samples = await source(lambda r: next(replies), retries=2).query("up", AT)
    assert [s.value for s in samples] == [1.0]


async def test_retries_are_bounded() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(503, text="<html>busy</html>")

    with pytest.raises(SourceProtocolError, match="not the API's JSON"):
        await source(handler, retries=2).query("up", AT)
    assert len(calls) == 3


async def test_connection_refused_is_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(SourceUnavailable, match="cannot reach Prometheus: connection refused") as caught:
        await source(handler, retries=1).query("up", AT)
    assert caught.value.url == f"{URL}/api/v1/query"


async def test_slow_prometheus_is_a_timeout() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(SourceTimeout, match="no answer within 10s"):
        await source(handler, retries=0).query("up", AT)


async def test_server_side_query_timeout_is_a_timeout() -> None:
    body = {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}
    with pytest.raises(SourceTimeout):
        await source(lambda r: httpx.Response(503, json=body), retries=0).query("up", AT)


@pytest.mark.parametrize(
    "body",
    [
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
        {"status": "success", "data": None},
    ],
)
async def test_wrong_answers_are_protocol_errors(body: object) -> None:
    with pytest.raises(SourceProtocolError):
        await source(lambda r: httpx.Response(200, json=body)).query("up", AT)


async def test_metric_names_asks_only_for_candidates() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "success", "data": ["vllm_a", "unrelated"]})

    found = await source(handler).metric_names({"vllm:a", "vllm_a"}, AT, AT)
    assert found == {"vllm_a"}
    assert seen[0].url.params["match[]"] == '{__name__=~"vllm:a|vllm_a"}'


@respx.mock
async def test_auth_and_extra_headers_are_sent() -> None:
    route = respx.post(f"{URL}/api/v1/query").mock(return_value=vector())
    config = PrometheusConfig(url=URL, bearer_token="s3cret", headers={"X-Scope-OrgID": "tenant-a"})
    async with config.client() as client:
        await PrometheusSource(config, client).query("up", AT)
    request = route.calls.last.request
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.headers["X-Scope-OrgID"] == "tenant-a"
    assert "s3cret" not in repr(config)


@respx.mock
async def test_basic_auth_is_sent() -> None:
    route = respx.post(f"{URL}/api/v1/query").mock(return_value=vector())
    config = PrometheusConfig(url=URL, basic_auth=("user", "pw"))
    async with config.client() as client:
        await PrometheusSource(config, client).query("up", AT)
    assert route.calls.last.request.headers["Authorization"] == "Basic dXNlcjpwdw=="


async def test_warnings_of_a_partial_answer_reach_the_samples() -> None:
    """Thanos / Mimir answer success with `warnings` when a store or ingester was missing."""
    from diagnosd.sources.base import Samples, warnings_of

    warning = "receive 10.0.0.7:10901: rpc error: code = Unavailable"

    def handler(request: httpx.Request) -> httpx.Response:
        body = {
            "status": "success",
            "warnings": [warning, "PromQL info: metric might not be a counter, name does not end in _total"],
            "data": {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1.0, "2"]}]},
        }
        return httpx.Response(200, json=body)

    samples = await source(handler).query("up", AT)
    assert isinstance(samples, Samples)
    assert [s.value for s in samples] == [2.0]
    assert warnings_of(samples) == (warning,)


async def test_a_complete_answer_has_no_warnings() -> None:
    from diagnosd.sources.base import warnings_of

    samples = await source(lambda r: vector(({"pod": "a"}, "1"))).query("up", AT)
    assert warnings_of(samples) == ()


async def test_a_partial_answer_makes_a_would_be_clear_check_unknown() -> None:
    """From the HTTP response to the verdict: warnings never let a check read clear."""
    from diagnosd.engine import Evaluator
    from diagnosd.findings import Reason, Verdict
    from diagnosd.trees.model import Tree

    text = {"zh": "中", "en": "en"}
    tree = Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": text,
            "target": ["pod"],
            "detect": {"title": text, "query": "max by ($target) (waiting)", "compare": {"above": 10}},
            "nodes": [
                {
                    "id": "kv",
                    "title": text,
                    "query": "max by ($target) (kv)",
                    "compare": {"above": 0.9},
                    "conclusion": {"cause": "kv_pool_full", "title": text, "remediation": [text]},
                }
            ],
        }
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/api/v1/label"):
            return httpx.Response(200, json={"status": "success", "data": ["waiting", "kv"]})
        query = dict(httpx.QueryParams(request.content.decode()))["query"]
        value = "50" if "waiting" in query else "0.5"
        body = {
            "status": "success",
            "warnings": ["store 10.0.0.7 did not answer"],
            "data": {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1.0, value]}]},
        }
        return httpx.Response(200, json=body)

    diagnosis = await Evaluator(source(handler)).diagnose(tree, None, AT)
    target = diagnosis.targets[0]
    assert target.symptom_present is True
    assert target.detect.warnings == ("store 10.0.0.7 did not answer",)
    kv = next(c for c in target.checks if c.id == "kv")
    assert (kv.verdict, kv.reason) == (Verdict.UNKNOWN, Reason.PARTIAL)
    assert any("store 10.0.0.7 did not answer" in note for note in diagnosis.notes)

"""The Prometheus client at its boundary: answers, errors, timeouts, retries and auth headers (the
HTTP API faked with respx; what PromQL means is tested against a real Prometheus elsewhere)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime

import httpx
import pytest
import respx

from diagnosd.errors import QueryRejected, SourceProtocolError, SourceTimeout, SourceUnavailable
from diagnosd.sources import PrometheusConfig, PrometheusSource
from tests.fakes.prometheus import api_error, success, vector

URL = "http://prom.test:9090"
AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
Connect = Callable[..., PrometheusSource]

pytestmark = pytest.mark.respx(base_url=URL, using="httpx")


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """PrometheusSources on the clients their config builds (no backoff between retries), closed after."""
    async with AsyncExitStack() as clients:

        def connect(**config: object) -> PrometheusSource:
            cfg = PrometheusConfig(url=URL, backoff=0.0, **config)  # type: ignore[arg-type]
            client = cfg.client()
            clients.push_async_callback(client.aclose)
            return PrometheusSource(cfg, client)

        yield connect


async def test_query_posts_promql_and_time_and_parses_special_values(
    respx_mock: respx.MockRouter, connect: Connect
) -> None:
    route = respx_mock.post("/api/v1/query").mock(
        return_value=vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "NaN"), ({"pod": "c"}, "+Inf"))
    )
    samples = await connect().query('up{pod="x"}', AT)
    assert [(s.labels["pod"], s.value) for s in samples[::2]] == [("a", 1.5), ("c", math.inf)]
    assert math.isnan(samples[1].value)
    request = route.calls.last.request
    form = dict(httpx.QueryParams(request.content.decode()))
    assert form == {"query": 'up{pod="x"}', "time": f"{AT.timestamp():.3f}", "timeout": "10s"}
    assert route.call_count == 1


async def test_scalar_result_is_one_unlabelled_sample(respx_mock: respx.MockRouter, connect: Connect) -> None:
    respx_mock.post("/api/v1/query").mock(return_value=success({"resultType": "scalar", "result": [1.0, "3"]}))
    (sample,) = await connect().query("3", AT)
    assert (dict(sample.labels), sample.value) == ({}, 3.0)


async def test_bad_query_is_rejected_with_prometheus_message_and_not_retried(
    respx_mock: respx.MockRouter, connect: Connect
) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=api_error(400, "bad_data", "1:4: parse error"))
    with pytest.raises(QueryRejected) as caught:
        await connect().query("up{", AT)
    assert caught.value.detail == "HTTP 400 bad_data: 1:4: parse error"
    assert caught.value.query == "up{"
    assert route.call_count == 1


async def test_transient_5xx_is_retried_then_succeeds(respx_mock: respx.MockRouter, connect: Connect) -> None:
    route = respx_mock.post("/api/v1/query").mock(
        side_effect=[httpx.Response(503, text="overloaded"), vector(({"pod": "a"}, "1"))]
    )
    samples = await connect(retries=2).query("up", AT)
    assert [s.value for s in samples] == [1.0]
    assert route.call_count == 2


async def test_retries_are_bounded(respx_mock: respx.MockRouter, connect: Connect) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(SourceProtocolError, match="not the API's JSON"):
        await connect(retries=2).query("up", AT)
    assert route.call_count == 3


@pytest.mark.parametrize(
    "answer",
    [
        api_error(503, "unavailable", "TSDB not ready"),
        httpx.Response(503, text="Service Unavailable"),
    ],
)
async def test_a_503_after_its_retries_is_unavailable_not_a_wrong_answer(
    respx_mock: respx.MockRouter, connect: Connect, answer: httpx.Response
) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=answer)
    with pytest.raises(SourceUnavailable, match="HTTP 503") as caught:
        await connect(retries=1).query("up", AT)
    assert (caught.value.query, route.call_count) == ("up", 2)


async def test_connection_refused_is_unavailable(respx_mock: respx.MockRouter, connect: Connect) -> None:
    respx_mock.post("/api/v1/query").mock(side_effect=httpx.ConnectError("connection refused"))
    with pytest.raises(SourceUnavailable, match="cannot reach Prometheus: connection refused") as caught:
        await connect(retries=1).query("up", AT)
    assert caught.value.url == f"{URL}/api/v1/query"


async def test_slow_prometheus_is_a_timeout(respx_mock: respx.MockRouter, connect: Connect) -> None:
    respx_mock.post("/api/v1/query").mock(side_effect=httpx.ReadTimeout("timed out"))
    with pytest.raises(SourceTimeout, match="no answer within 10s"):
        await connect(retries=0).query("up", AT)


async def test_server_side_query_timeout_is_a_timeout(respx_mock: respx.MockRouter, connect: Connect) -> None:
    respx_mock.post("/api/v1/query").mock(
        return_value=api_error(503, "timeout", "query timed out in expression evaluation")
    )
    with pytest.raises(SourceTimeout):
        await connect(retries=0).query("up", AT)


@pytest.mark.parametrize(
    "data",
    [
        {"resultType": "matrix", "result": []},
        {"resultType": "vector", "result": [{"metric": {}}]},
        {"resultType": "vector", "result": [{"metric": {"pod": 7}, "value": [1, "2"]}]},  # a number for a label
        {"resultType": "vector", "result": [{"metric": ["pod", "a"], "value": [1, "2"]}]},  # labels not an object
        None,
    ],
)
async def test_wrong_answers_are_protocol_errors(respx_mock: respx.MockRouter, connect: Connect, data: object) -> None:
    respx_mock.post("/api/v1/query").mock(return_value=success(data))
    with pytest.raises(SourceProtocolError):
        await connect().query("up", AT)


async def test_label_values_are_one_string_each_across_samples_and_answers(
    respx_mock: respx.MockRouter, connect: Connect
) -> None:
    # Decoded apart, each answer's "prod" and pod names are strings of their own; kept once each.
    respx_mock.post("/api/v1/query").mock(
        return_value=vector(
            ({"namespace": "prod", "pod": "p-0", "gpu": "0"}, "1"),
            ({"namespace": "prod", "pod": "p-0", "gpu": "1"}, "2"),
        )
    )
    source = connect()
    first, second = await source.query("a", AT), await source.query("b", AT)
    values = [sample.labels[name] for sample in (*first, *second) for name in ("namespace", "pod")]
    assert values == ["prod", "p-0"] * 4
    assert len({id(value) for value in values}) == 2


async def test_metric_names_asks_only_for_candidates(respx_mock: respx.MockRouter, connect: Connect) -> None:
    route = respx_mock.get("/api/v1/label/__name__/values").mock(return_value=success(["vllm_a", "unrelated"]))
    found = await connect().metric_names({"vllm:a", "vllm_a"}, AT, AT)
    assert found == {"vllm_a"}
    assert route.calls.last.request.url.params["match[]"] == '{__name__=~"vllm:a|vllm_a"}'


async def test_auth_and_extra_headers_are_sent(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=vector())
    config = PrometheusConfig(url=URL, bearer_token="s3cret", headers={"X-Scope-OrgID": "tenant-a"})
    async with config.client() as client:
        await PrometheusSource(config, client).query("up", AT)
    request = route.calls.last.request
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.headers["X-Scope-OrgID"] == "tenant-a"
    assert "s3cret" not in repr(config)


async def test_basic_auth_is_sent(respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=vector())
    config = PrometheusConfig(url=URL, basic_auth=("user", "pw"))
    async with config.client() as client:
        await PrometheusSource(config, client).query("up", AT)
    assert route.calls.last.request.headers["Authorization"] == "Basic dXNlcjpwdw=="


async def test_warnings_of_a_partial_answer_reach_the_samples(respx_mock: respx.MockRouter, connect: Connect) -> None:
    """Thanos / Mimir answer success with `warnings` when a store or ingester was missing."""
    from diagnosd.sources.base import Samples, warnings_of

    warning = "receive 10.0.0.7:10901: rpc error: code = Unavailable"
    info = "PromQL info: metric might not be a counter, name does not end in _total"
    respx_mock.post("/api/v1/query").mock(return_value=vector(({"pod": "a"}, "2"), warnings=[warning, info]))
    samples = await connect().query("up", AT)
    assert isinstance(samples, Samples)
    assert [s.value for s in samples] == [2.0]
    assert warnings_of(samples) == (warning,)


async def test_a_partial_victoriametrics_answer_is_a_warning(respx_mock: respx.MockRouter, connect: Connect) -> None:
    """VictoriaMetrics cluster flags a partial answer with `isPartial`, not `warnings`."""
    from diagnosd.sources.base import warnings_of
    from diagnosd.sources.prometheus import PARTIAL

    body = {"status": "success", "isPartial": True, "data": {"resultType": "vector", "result": []}}
    respx_mock.post("/api/v1/query").mock(return_value=httpx.Response(200, json=body))
    assert warnings_of(await connect().query("up", AT)) == (PARTIAL,)
    complete = {**body, "isPartial": False}  # single-node VictoriaMetrics says false on every answer
    respx_mock.post("/api/v1/query").mock(return_value=httpx.Response(200, json=complete))
    assert warnings_of(await connect().query("up", AT)) == ()


async def test_an_empty_label_value_is_no_label(respx_mock: respx.MockRouter, connect: Connect) -> None:
    """VictoriaMetrics' label_replace keeps pod="" where Prometheus drops it: the same answer either way."""
    respx_mock.post("/api/v1/query").mock(return_value=vector(({"pod": "", "namespace": "prod"}, "1")))
    [sample] = await connect().query("up", AT)
    assert sample.labels == {"namespace": "prod"}


async def test_a_complete_answer_has_no_warnings(respx_mock: respx.MockRouter, connect: Connect) -> None:
    from diagnosd.sources.base import warnings_of

    respx_mock.post("/api/v1/query").mock(return_value=vector(({"pod": "a"}, "1")))
    samples = await connect().query("up", AT)
    assert warnings_of(samples) == ()


async def test_a_partial_answer_makes_a_would_be_clear_check_unknown(
    respx_mock: respx.MockRouter, connect: Connect
) -> None:
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

    def answer(request: httpx.Request) -> httpx.Response:
        query = dict(httpx.QueryParams(request.content.decode()))["query"]
        value = "50" if "waiting" in query else "0.5"
        return vector(({"pod": "a"}, value), warnings=["store 10.0.0.7 did not answer"])

    respx_mock.get(path__startswith="/api/v1/label").mock(return_value=success(["waiting", "kv"]))
    respx_mock.post("/api/v1/query").mock(side_effect=answer)
    diagnosis = await Evaluator(connect()).diagnose(tree, None, AT)
    target = diagnosis.targets[0]
    assert target.symptom_present is True
    assert target.detect.warnings == ("store 10.0.0.7 did not answer",)
    kv = next(c for c in target.checks if c.id == "kv")
    assert (kv.verdict, kv.reason) == (Verdict.UNKNOWN, Reason.PARTIAL)
    assert any("store 10.0.0.7 did not answer" in note for note in diagnosis.notes)

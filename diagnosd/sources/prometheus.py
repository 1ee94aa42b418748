"""Prometheus HTTP API client (/api/v1/query, /api/v1/label/__name__/values, /api/v1/metadata).

httpx errors are translated here into diagnosd's own SourceError types; nothing above this module
sees httpx. Works unchanged against Thanos Querier, Mimir and VictoriaMetrics. A 429 or 503 with
`Retry-After` is retried no sooner than it asks, or, when that is later than the diagnosis can wait
(its deadline; without one the per-query timeout), fails at once saying when to call again.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from sys import intern
from typing import Any, Literal

import httpx

from diagnosd.errors import (
    QueryRejected,
    SourceError,
    SourceProtocolError,
    SourceTimeout,
    SourceUnavailable,
)
from diagnosd.moments import Clock, utc_now
from diagnosd.sources.base import Sample, Samples
from diagnosd.sources.deadline import time_left
from diagnosd.sources.transport import AiohttpTransport, tls
from diagnosd.urls import redact, scrub

UNAVAILABLE, TOO_MANY = 503, 429
RETRYABLE_STATUS = {TOO_MANY, 502, UNAVAILABLE, 504}
# What carries the requests: aiohttp's connection pool (diagnosd.sources.transport), or httpx's own.
Stack = Literal["aiohttp", "httpx"]
# Where a success body's `warnings` travel from the HTTP layer to the samples.
WARNINGS = "__diagnosd_warnings__"


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    timeout: float = 10.0
    retries: int = 2
    backoff: float = 0.2
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    # e.g. {"X-Scope-OrgID": "tenant-a"} for Mimir / Cortex multi-tenancy.
    headers: Mapping[str, str] = field(default_factory=dict)
    verify: bool | str = True
    client_cert: tuple[str, str] | None = None
    stack: Stack = "aiohttp"

    def client(self) -> httpx.AsyncClient:
        """An AsyncClient configured for this Prometheus; the caller owns (and closes) it."""
        headers = {"User-Agent": "diagnosd", **self.headers}
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        auth = httpx.BasicAuth(*self.basic_auth) if self.basic_auth else None
        # Plain http needs no TLS context (building one reads the CA bundle: milliseconds).
        context = tls(self.verify, self.client_cert) if self.url.startswith("https:") else None
        carried: dict[str, Any] = (
            {"transport": AiohttpTransport(ssl_context=context)}
            if self.stack == "aiohttp"
            else {"verify": context or True}
        )
        return httpx.AsyncClient(
            base_url=self.url.rstrip("/"), headers=headers, auth=auth, timeout=httpx.Timeout(self.timeout), **carried
        )


class PrometheusSource:
    def __init__(
        self,
        config: PrometheusConfig,
        client: httpx.AsyncClient,
        *,
        clock: Clock = utc_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._client = client
        # The wall clock reads a Retry-After given as an HTTP date; `sleep` waits between attempts.
        self._clock = clock
        self._sleep = sleep

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        form = {"query": promql, "time": _unix(at), "timeout": f"{self.config.timeout:g}s"}
        data = await self._call("POST", "/api/v1/query", promql, data=form)
        return _samples(data, self._url("/api/v1/query"), promql)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        if not candidates:
            return set()
        selector = "{" + ", ".join(['__name__=~"' + "|".join(sorted(candidates)) + '"', *where]) + "}"
        params = {"match[]": selector, "start": _unix(start), "end": _unix(end)}
        data = await self._call("GET", "/api/v1/label/__name__/values", None, params=params)
        if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
            raise SourceProtocolError("label values are not a list of names", url=self._url("/api/v1/label"))
        return set(data) & set(candidates)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        """GET /api/v1/metadata?metric=NAME for each name: its declared type, where a target declares it.

        The metadata belongs to the family as exposed: a counter `x_total` is `x_total` in the
        text format and `x` in OpenMetrics (Prometheus scrapes OpenMetrics when offered), so both
        are asked. A backend without the endpoint (404, or an error body) answers None.
        """
        wanted = sorted(set(names))
        if not wanted:
            return {}
        asked = sorted({form for name in wanted for form in _family_forms(name)})
        try:
            replies = await asyncio.gather(*(self._metadata_one(form) for form in asked))
        except (QueryRejected, SourceProtocolError):
            return None
        declared = {form: kind for form, kind in zip(asked, replies, strict=True) if kind is not None}
        out: dict[str, str] = {}
        for name in wanted:
            kind = next((declared[f] for f in _family_forms(name) if f in declared), None)
            if kind is not None:
                out[name] = kind
        return out

    async def _metadata_one(self, name: str) -> str | None:
        data = await self._call("GET", "/api/v1/metadata", None, params={"metric": name})
        if not isinstance(data, dict):
            raise SourceProtocolError("metadata is not an object", url=self._url("/api/v1/metadata"))
        entries = data.get(name)
        if not isinstance(entries, list):
            return None
        kinds = {str(e.get("type")) for e in entries if isinstance(e, dict) and e.get("type")}
        # Targets that disagree (one says counter, another gauge) declare nothing certain.
        return kinds.pop() if len(kinds) == 1 else None

    async def _call(self, method: str, path: str, promql: str | None, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                return await self._once(method, path, promql, **kwargs)
            except (SourceUnavailable, SourceTimeout, _Retryable) as error:
                failure = error.final() if isinstance(error, _Retryable) else error
                if attempt >= self.config.retries:
                    raise failure from None
                pause = self._pause(attempt, failure)
            attempt += 1
            await self._sleep(pause)

    def _pause(self, attempt: int, failure: SourceError) -> float:
        """Before the next attempt: the backoff, or longer where Prometheus asked (Retry-After); raises
        `failure`, saying so, when what it asked is beyond what the caller can wait."""
        backoff = self.config.backoff * (1 << attempt)
        asked = failure.retry_after if isinstance(failure, SourceUnavailable) else None
        if asked is None:
            return backoff
        left = time_left()
        patience = self.config.timeout if left is None else left
        if asked > patience:
            raise SourceUnavailable(
                f"{failure.detail}; that is beyond the {max(patience, 0):.0f}s this diagnosis can still wait",
                url=failure.url,
                query=failure.query,
                status=failure.status,
                retry_after=asked,
            ) from None
        return max(backoff, asked)

    async def _once(self, method: str, path: str, promql: str | None, **kwargs: Any) -> Any:
        url = self._url(path)
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as error:
            raise SourceTimeout(
                f"no answer within {self.config.timeout:g}s ({type(error).__name__})", url=url, query=promql
            ) from error
        except httpx.TransportError as error:
            raise SourceUnavailable(
                f"cannot reach Prometheus: {scrub(str(error), self.config.url) or type(error).__name__}",
                url=url,
                query=promql,
            ) from error
        return _payload(response, url, promql, self._clock())

    def _url(self, path: str) -> str:
        return redact(self.config.url.rstrip("/") + path)


class _Retryable(Exception):
    """A transient HTTP status; becomes a SourceError when retries run out."""

    def __init__(self, error: SourceError) -> None:
        self.error = error

    def final(self) -> SourceError:
        return self.error


def _payload(response: httpx.Response, url: str, promql: str | None, now: datetime) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if not isinstance(body, dict):
        text = f"HTTP {status} with a body that is not the API's JSON: {response.text[:200]!r}"
        error = _failure(status, text, url, promql, response, now)
        raise _Retryable(error) if status in RETRYABLE_STATUS else error
    if body.get("status") == "success" and response.status_code < 400:
        data = body.get("data")
        warnings = _warnings(body)
        if warnings and isinstance(data, dict):
            # A partial answer (Thanos / Mimir with a store or ingester missing): keep its warnings.
            data = {**data, WARNINGS: warnings}
        return data
    kind, message = body.get("errorType", "unknown"), body.get("error", "no error message")
    text = f"HTTP {status} {kind}: {message}"
    if kind == "timeout":
        raise SourceTimeout(text, url=url, query=promql, status=status)
    if status in RETRYABLE_STATUS:
        raise _Retryable(_failure(status, text, url, promql, response, now))
    if 400 <= status < 500:
        raise QueryRejected(text, url=url, query=promql, status=status)
    raise SourceProtocolError(text, url=url, query=promql, status=status)


def _failure(
    status: int, text: str, url: str, promql: str | None, response: httpx.Response, now: datetime
) -> SourceError:
    """503 is Prometheus (or the proxy before it) saying it cannot serve now, e.g. while it starts,
    and 429 that it will not serve us now: unavailable, like a refused connection, not an answer
    that breaks the API's promise. Both may say when to come back (Retry-After)."""
    if status not in (UNAVAILABLE, TOO_MANY):
        return SourceProtocolError(text, url=url, query=promql, status=status)
    asked = retry_after(response.headers.get("Retry-After"), now)
    if asked is not None:
        again = (now + timedelta(seconds=asked)).astimezone(UTC).isoformat(timespec="seconds")
        text = f"{text}; Prometheus asked to be called again in {asked:g}s (at {again})"
    return SourceUnavailable(text, url=url, query=promql, status=status, retry_after=asked)


def retry_after(header: str | None, now: datetime) -> float | None:
    """Seconds from `now` a Retry-After header asks to wait: delay-seconds or an HTTP date (RFC 9110
    10.2.3); None when absent or unreadable, 0 for a date already past."""
    if header is None:
        return None
    value = header.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 850 / asctime forms carry no zone: HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def _samples(data: Any, url: str, promql: str) -> list[Sample]:
    if not isinstance(data, dict):
        raise SourceProtocolError("query data is not an object", url=url, query=promql)
    kind, result = data.get("resultType"), data.get("result")
    if not isinstance(result, list):
        raise SourceProtocolError(f"{kind} result is not a list", url=url, query=promql)
    try:
        warnings = data.get(WARNINGS, ())
        if kind == "vector":
            return Samples((Sample(_labels(item["metric"]), _number(item["value"][1])) for item in result), warnings)
        if kind == "scalar":
            return Samples([Sample({}, _number(result[1]))], warnings)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise SourceProtocolError(f"malformed {kind} result: {error}", url=url, query=promql) from error
    raise SourceProtocolError(f"instant query returned {kind!r}, expected a vector", url=url, query=promql)


def _labels(metric: dict[str, str]) -> dict[str, str]:
    """A series' labels; an empty value is no label (Prometheus' data model: it never returns one,
    VictoriaMetrics 1.79's label_replace keeps `pod=""` where the source label is missing).

    Values are interned: a fleet's answers repeat the same namespaces, pods, nodes, models and GPU
    indexes in every sample of every query, and the decoder makes a new string of each occurrence.
    One string each cut a 1000-pod round's peak resident set by 14 MB (bench/harness.py), for about
    a third more of the decoder's own time. (sys.intern's strings are freed once unused.)"""
    if "" in metric.values():
        return {name: intern(value) for name, value in metric.items() if value != ""}
    # Most series have none: the decoded object itself is kept (read for every sample of a fleet).
    for name, value in metric.items():
        metric[name] = intern(value)
    return metric


# VictoriaMetrics cluster says a partial answer (a vmstorage node did not answer) with a top-level
# `isPartial` instead of Prometheus' `warnings` (vmselect's query_response.qtpl).
PARTIAL = "VictoriaMetrics answered partially (isPartial: some vmstorage nodes did not answer)"


def _warnings(body: dict[str, Any]) -> tuple[str, ...]:
    """The response's `warnings`, without PromQL's informational notes (`PromQL info: ...`), and
    VictoriaMetrics' partial flag as one more."""
    raw = body.get("warnings")
    found = tuple(str(w) for w in raw if not str(w).startswith("PromQL info:")) if isinstance(raw, list) else ()
    return (*found, PARTIAL) if body.get("isPartial") is True else found


def _family_forms(name: str) -> tuple[str, ...]:
    """The names a series' family may carry in metadata: itself, and without `_total` (OpenMetrics)."""
    return (name, name[: -len("_total")]) if name.endswith("_total") and len(name) > len("_total") else (name,)


def _number(text: Any) -> float:
    value = float(text)  # Prometheus sends "NaN", "+Inf", "-Inf" as strings; float() takes them
    return math.nan if math.isnan(value) else value


def _unix(moment: datetime) -> str:
    return f"{moment.timestamp():.3f}"

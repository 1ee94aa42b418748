"""The Prometheus client's transport on real loopback sockets: what goes on the wire, and every
failure there raising what httpx's own transport raises, so the source's errors read the same on
either stack (each case runs on both). The server is a few lines of asyncio speaking HTTP/1.1 as
a script says: that is how a reset, a half-sent body or a silent peer is made on purpose."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import httpx
import pytest

from diagnosd.errors import SourceTimeout, SourceUnavailable
from diagnosd.promlocal import free_port
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.sources.prometheus import Stack
from diagnosd.sources.transport import AiohttpTransport
from tests.fakes.wire import Script, Wire, answer, answering, scripted

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1, "2"]}]},
}

stacks = pytest.mark.parametrize("stack", get_args(Stack))


@asynccontextmanager
async def source(url: str, stack: Stack, **config: object) -> AsyncIterator[PrometheusSource]:
    cfg = PrometheusConfig(url=url, retries=0, backoff=0.0, stack=stack, **config)  # type: ignore[arg-type]
    async with cfg.client() as client:
        yield PrometheusSource(cfg, client)


@stacks
async def test_the_request_on_the_wire_is_httpx_s_own(stack: Stack) -> None:
    script = answering(answer(json.dumps(VECTOR).encode()))
    async with (
        scripted(script) as (wire, url),
        source(url, stack, bearer_token="t0k", headers={"X-Scope-OrgID": "a"}) as s,
    ):
        samples = await s.query('up{job=~"a|b"}', AT)
    assert [(dict(x.labels), x.value) for x in samples] == [({"pod": "a"}, 2.0)]
    (sent,) = wire.requests
    head, body = sent.split(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    assert lines[0] == "POST /api/v1/query HTTP/1.1"
    assert headers["authorization"] == "Bearer t0k"
    assert headers["x-scope-orgid"] == "a"
    assert headers["user-agent"] == "diagnosd"
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert dict(httpx.QueryParams(body.decode())) == {
        "query": 'up{job=~"a|b"}',
        "time": f"{AT.timestamp():.3f}",
        "timeout": "10s",
    }


@stacks
async def test_a_query_string_is_encoded_once(stack: Stack) -> None:
    names = {"status": "success", "data": ["up"]}
    script = answering(answer(json.dumps(names).encode()))
    async with scripted(script) as (wire, url), source(url, stack) as s:
        found = await s.metric_names(["up", "a b"], AT, AT, where=['pod="x/y"'])
    assert found == {"up"}
    target = wire.requests[0].split(b"\r\n")[0].decode().split(" ")[1]
    # What httpx itself writes for these params: a transport re-encoding it would double the %.
    params = httpx.Request("GET", "http://x" + target).url.params
    assert "%25" not in target
    assert all("x/y" in m for m in params.get_list("match[]"))


@stacks
async def test_a_gzipped_answer_is_decoded(stack: Stack) -> None:
    script = answering(answer(gzip.compress(json.dumps(VECTOR).encode()), "Content-Encoding: gzip"))
    async with scripted(script) as (wire, url), source(url, stack) as s:
        samples = await s.query("up", AT)
    assert [x.value for x in samples] == [2.0]
    assert b"gzip" in next(
        line for line in wire.requests[0].lower().split(b"\r\n") if line.startswith(b"accept-encoding")
    )


@stacks
async def test_queries_in_turn_share_one_connection_which_closes_with_the_client(stack: Stack) -> None:
    body = json.dumps(VECTOR).encode()
    script = answering(answer(body), answer(body), answer(body))
    async with scripted(script) as (wire, url):
        async with source(url, stack) as s:
            for _ in range(3):
                await s.query("up", AT)
            assert not wire.closed.is_set()
        await asyncio.wait_for(wire.closed.wait(), 5)
    assert (wire.connections, len(wire.requests)) == (1, 3)


async def raised(url: str, stack: Stack) -> type[httpx.TransportError]:
    """What the client raises for a query to `url` on `stack`."""
    async with PrometheusConfig(url=url, stack=stack).client() as client:
        with pytest.raises(httpx.TransportError) as failed:
            await client.post("/api/v1/query", data={"query": "up"})
    return type(failed.value)


@stacks
async def test_a_closed_port_is_unavailable(stack: Stack) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with source(url, stack) as s:
        with pytest.raises(SourceUnavailable) as failed:
            await s.query("up", AT)
    assert failed.value.detail.startswith("cannot reach Prometheus: ")
    assert await raised(url, stack) is httpx.ConnectError


async def _hang_up(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")


async def _half_a_body(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(answer(json.dumps(VECTOR).encode())[:-10])
    await writer.drain()


async def _not_http(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    await writer.drain()


async def _reset(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.transport.abort()


@pytest.mark.parametrize("script", [_hang_up, _half_a_body, _not_http, _reset], ids=lambda s: s.__name__[1:])
async def test_a_peer_failing_mid_answer_raises_what_httpx_raises(script: Script) -> None:
    async with scripted(script) as (_, url):
        ours, theirs = await raised(url, "aiohttp"), await raised(url, "httpx")
        async with source(url, "aiohttp") as s:
            with pytest.raises(SourceUnavailable) as failed:
                await s.query("up", AT)
    assert ours is theirs
    assert ours in (httpx.RemoteProtocolError, httpx.ReadError)  # not a timeout, not a refused connection
    assert failed.value.detail.startswith("cannot reach Prometheus: ")
    assert failed.value.query == "up"


@stacks
async def test_a_silent_peer_times_out_as_a_read_timeout(stack: Stack) -> None:
    async def silent(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async with scripted(silent) as (_, url), source(url, stack, timeout=0.3) as s:
        with pytest.raises(SourceTimeout) as failed:
            await s.query("up", AT)
    assert failed.value.detail == "no answer within 0.3s (ReadTimeout)"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), and its key."""
    here = tmp_path_factory.mktemp("tls")
    cert, key = here / "cert.pem", here / "key.pem"
    make = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
    subprocess.run(
        [*make.split(), "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@stacks
async def test_tls_is_verified_against_the_configured_ca(stack: Stack, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    body = json.dumps(VECTOR).encode()
    script = answering(answer(body), answer(body))
    async with scripted(script, ssl_context=server) as (_, url):
        async with source(url, stack, verify=str(cert)) as trusted:
            assert [x.value for x in await trusted.query("up", AT)] == [2.0]
        async with source(url, stack, verify=False) as unverified:
            assert [x.value for x in await unverified.query("up", AT)] == [2.0]
        async with source(url, stack) as untrusted:  # the system's CAs do not know it
            with pytest.raises(SourceUnavailable) as failed:
                await untrusted.query("up", AT)
    assert "certificate verify failed" in failed.value.detail.lower()


async def test_a_client_left_unused_closes_without_a_session() -> None:
    transport = AiohttpTransport()
    await transport.aclose()  # nothing opened: nothing to close, no warning
    async with scripted(answering(answer(json.dumps(VECTOR).encode()))) as (_, url):
        client = httpx.AsyncClient(transport=transport, base_url=url)
        assert (await client.get("/")).status_code == 200
        await client.aclose()
        assert transport._session is None


@stacks
async def test_the_environment_s_proxy_carries_the_query_unless_no_proxy_exempts_the_host(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = answering(answer(json.dumps(VECTOR).encode()))
    async with scripted(script) as (proxy, proxy_url):
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.setenv("NO_PROXY", "exempt.invalid")
        async with source("http://prom.invalid:9090", stack) as s:  # unresolvable: only the proxy knows it
            assert [x.value for x in await s.query("up", AT)] == [2.0]
        assert proxy.requests[0].startswith(b"POST http://prom.invalid:9090/api/v1/query HTTP/1.1\r\n")
        async with source("http://exempt.invalid:9090", stack) as s:
            with pytest.raises(SourceUnavailable):
                await s.query("up", AT)
    assert len(proxy.requests) == 1  # the exempt host was asked directly (and could not be found)

"""AiohttpTransport behaves, for what the source sends and every failure on the wire, as httpx's
own transport does: each test runs the same exchange against a scripted loopback server on both
stacks (`stack="aiohttp"` and `stack="httpx"`) and compares. Known differences, none of which the
source meets: aiohttp puts `Content-Length: 0` on a DELETE, sends a streamed body whole, and a
client dropped without `aclose` is reported ("Unclosed client session") where httpx says nothing.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import warnings
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest

from diagnosd.promlocal import free_port
from diagnosd.sources import PrometheusConfig
from diagnosd.sources.prometheus import Stack
from diagnosd.sources.transport import AiohttpTransport
from tests.fakes.wire import Script, Wire, answer, answering, scripted

stacks = pytest.mark.parametrize("stack", get_args(Stack))


def client(url: str, stack: Stack, **config: Any) -> httpx.AsyncClient:
    return PrometheusConfig(url=url, stack=stack, **config).client()


async def outcome(url: str, stack: Stack, method: str = "GET", path: str = "/x", **kwargs: Any) -> Any:
    """What the client gives back for one request: the response's parts, or the exception's class."""
    async with client(url, stack) as c:
        try:
            r = await c.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            return type(error)
    return (r.status_code, r.reason_phrase, r.http_version, r.headers.multi_items(), r.content)


# --- Responses: what httpx hands back must not depend on the stack. ---------------------------------

BODY = b'{"status":"success"}'
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
RESPONSES: dict[str, tuple[str, bytes]] = {
    "plain": ("GET", answer(BODY, "Content-Type: application/json")),
    "gzip": ("GET", answer(gzip.compress(BODY), "Content-Encoding: gzip")),
    "deflate": ("GET", answer(zlib.compress(BODY), "Content-Encoding: deflate")),
    "chunked": ("GET", CHUNKED),
    "head": ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"),
    "no-content": ("GET", b"HTTP/1.1 204 No Content\r\n\r\n"),
    "early-hints": ("GET", b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + answer(BODY)),
    "reason-and-repeats": ("GET", answer(BODY, "Set-Cookie: a=1", "Set-Cookie: b=2", status="200 Fine")),
    "until-eof": ("GET", b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY),
}


async def _once_then_close(reply: bytes) -> Script:
    async def script(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.request(reader)
        writer.write(reply)
        await writer.drain()

    return script


@pytest.mark.parametrize("case", RESPONSES)
async def test_the_response_is_the_same_on_both_stacks(case: str) -> None:
    method, reply = RESPONSES[case]
    got = {}
    for stack in get_args(Stack):
        async with scripted(await _once_then_close(reply)) as (_, url):
            got[stack] = await outcome(url, stack, method)
    assert got["aiohttp"] == got["httpx"]
    assert not isinstance(got["httpx"], type)  # httpx itself read it


async def test_an_http_1_0_answer_reports_http_1_0() -> None:
    reply = answer(BODY, version="HTTP/1.0")
    got = {}
    for stack in get_args(Stack):
        async with scripted(await _once_then_close(reply)) as (_, url):
            got[stack] = await outcome(url, stack)
    assert got["httpx"][2] == "HTTP/1.0"
    assert got["aiohttp"] == got["httpx"]


@pytest.mark.parametrize(
    "headers",
    [("X-Long: " + "a" * 10_000,), tuple(f"X-H{i}: {i}" for i in range(200))],
    ids=["a-10KB-header", "200-headers"],
)
async def test_an_answer_httpx_accepts_is_accepted(headers: tuple[str, ...]) -> None:
    """httpcore lets h11 take a head of up to 100 KiB (httpcore/_async/http11.py:45)."""
    reply = answer(BODY, *headers)
    got = {}
    for stack in get_args(Stack):
        async with scripted(await _once_then_close(reply)) as (_, url):
            got[stack] = await outcome(url, stack)
    assert got["httpx"][0] == 200
    assert got["aiohttp"] == got["httpx"]


# --- Requests: what goes on the wire must not depend on the stack. ----------------------------------


def _header_lines(sent: bytes) -> tuple[str, list[tuple[str, str]]]:
    head = sent.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    pairs = sorted((k.lower(), v) for k, v in (line.split(": ", 1) for line in head[1:]))
    # The two servers listen on different ports: the Host header differs by that only.
    return head[0], [(k, "127.0.0.1:PORT" if k == "host" else v) for k, v in pairs]


REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "get-params": ("GET", {"params": {"match[]": ['up{a="x/y"}', "b c"], "q": "ä&="}}),
    "post-form": ("POST", {"data": {"query": "up"}}),
    "post-empty": ("POST", {}),
    "post-json": ("POST", {"json": {"a": 1}}),
    "post-bytes": ("POST", {"content": b"raw bytes"}),
    "repeated-header": ("GET", {"headers": [("X-Tenant", "a"), ("X-Tenant", "b")]}),
    # Not DELETE: aiohttp gives it a `Content-Length: 0` httpx does not send. The source sends GET
    # and POST only.
}


@pytest.mark.parametrize("case", REQUESTS)
async def test_the_request_on_the_wire_is_the_same_on_both_stacks(case: str) -> None:
    method, kwargs = REQUESTS[case]
    sent = {}
    for stack in get_args(Stack):
        async with scripted(answering(answer(BODY))) as (wire, url):
            async with client(url, stack) as c:
                assert (await c.request(method, "/api/v1/x", **kwargs)).status_code == 200
            (raw,) = wire.requests
            line, headers = _header_lines(raw)
            sent[stack] = (line, headers, raw.split(b"\r\n\r\n", 1)[1])
    assert sent["aiohttp"] == sent["httpx"]


async def _framed_reader(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads one request as RFC 9112 says: Transfer-Encoding chunked over any Content-Length."""
    head = await wire.head(reader)
    lines = [x.lower() for x in head.split(b"\r\n")]
    length = next((int(x.split(b":", 1)[1]) for x in lines if x.startswith(b"content-length:")), 0)
    body = b""
    if b"transfer-encoding: chunked" in lines:
        try:
            while True:
                size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 1)).strip(), 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers
                    break
                body += (await reader.readexactly(size + 2))[:-2]
        except (ValueError, TimeoutError):
            body = b"<not chunked>"
    else:
        body = await reader.readexactly(length)
    wire.requests.append(body)
    writer.write(answer(b"ok"))
    await writer.drain()


async def test_a_streamed_request_body_arrives_framed_once() -> None:
    """httpx sends a streamed body chunked; the aiohttp transport sends it whole with its length.
    Either is HTTP; announcing both (chunked and a Content-Length) is what must never go out."""

    async def parts() -> AsyncIterator[bytes]:
        yield b"hello "
        yield b"world"

    seen = {}
    for stack in get_args(Stack):
        async with scripted(_framed_reader) as (wire, url):
            async with client(url, stack) as c:
                try:
                    await asyncio.wait_for(c.post("/x", content=parts()), 5)
                except httpx.HTTPError as error:
                    wire.requests.append(type(error).__name__.encode())
            head, body = wire.requests[0], wire.requests[1]
            both = b"transfer-encoding: chunked" in head.lower() and b"content-length" in head.lower()
            seen[stack] = (both, body)
    assert seen == {"httpx": (False, b"hello world"), "aiohttp": (False, b"hello world")}


@pytest.fixture
def netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A netrc with credentials for 127.0.0.1, where NETRC points."""
    path = tmp_path / "netrc"
    path.write_text("machine 127.0.0.1 login alice password s3cret\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))


@pytest.mark.usefixtures("netrc")
async def test_credentials_in_netrc_are_not_sent() -> None:
    """httpx uses a netrc only when given httpx.NetRCAuth; aiohttp's trust_env would read it on
    every request (aiohttp/client.py:776-780), so the transport leaves trust_env off."""
    sent = {}
    for stack in get_args(Stack):
        async with scripted(answering(answer(BODY))) as (wire, url):
            async with client(url, stack) as c:
                await c.get("/x")
            sent[stack] = [h for h in _header_lines(wire.requests[0])[1] if h[0] == "authorization"]
    assert sent["httpx"] == []
    assert sent["aiohttp"] == sent["httpx"]


@pytest.mark.usefixtures("netrc")
async def test_a_bearer_token_works_with_a_netrc_present() -> None:
    """With trust_env, aiohttp refuses an Authorization header next to netrc credentials with a
    ValueError (aiohttp/client.py:784-793) that no httpx error stands for."""
    got = {}
    for stack in get_args(Stack):
        async with scripted(answering(answer(BODY))) as (_, url), client(url, stack, bearer_token="t0k") as c:
            try:
                got[stack] = (await c.get("/x")).status_code
            except Exception as error:  # what escapes is the finding
                got[stack] = type(error)
    assert got["httpx"] == 200
    assert got["aiohttp"] == got["httpx"]


# --- Proxies from the environment. --------------------------------------------------------------------


async def _proxy_answering(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await wire.request(reader)
    writer.write(answer(b"via proxy"))
    await writer.drain()


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY"])
async def test_a_proxy_from_the_environment_carries_plain_http(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target = f"http://127.0.0.1:{free_port()}"  # nothing listens there: only the proxy can answer
    got = {}
    for stack in get_args(Stack):
        async with scripted(_proxy_answering) as (wire, proxy):
            monkeypatch.setenv(variable, proxy)
            got[stack] = await outcome(target, stack)
            got[stack + " request line"] = wire.requests[0].split(b"\r\n")[0] if wire.requests else None
    assert got["httpx"][4] == b"via proxy"
    assert got["httpx request line"] == f"GET {target}/x HTTP/1.1".encode()
    assert got["aiohttp"] == got["httpx"]
    assert got["aiohttp request line"] == got["httpx request line"]


@pytest.mark.parametrize("form", ["no-scheme", "with-credentials"])
async def test_a_proxy_url_is_read_as_httpx_reads_it(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx takes HTTP_PROXY=host:port as http://host:port (httpx/_utils.py:43-45) and sends a
    proxy URL's user:password as Proxy-Authorization (httpx/_config.py, Proxy)."""
    target = f"http://127.0.0.1:{free_port()}"
    got = {}
    for stack in get_args(Stack):
        async with scripted(_proxy_answering) as (wire, proxy):
            hostport = proxy.removeprefix("http://")
            monkeypatch.setenv("HTTP_PROXY", hostport if form == "no-scheme" else f"http://u:p@{hostport}")
            got[stack] = await outcome(target, stack)
            seen = _header_lines(wire.requests[0])[1] if wire.requests else None
            got[stack + " proxy-authorization"] = [v for k, v in seen or () if k == "proxy-authorization"]
    assert got["httpx"][4] == b"via proxy"
    assert got["httpx proxy-authorization"] == ([] if form == "no-scheme" else ["Basic dTpw"])
    assert got["aiohttp"] == got["httpx"]
    assert got["aiohttp proxy-authorization"] == got["httpx proxy-authorization"]


async def test_no_proxy_bypasses_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    got = {}
    for stack in get_args(Stack):
        async with (
            scripted(_proxy_answering) as (proxy_wire, proxy),
            scripted(answering(answer(b"direct"))) as (_, url),
        ):
            monkeypatch.setenv("HTTP_PROXY", proxy)
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            got[stack] = ((await outcome(url, stack))[4], proxy_wire.connections)
    assert got["httpx"] == (b"direct", 0)
    assert got["aiohttp"] == got["httpx"]


async def test_a_proxy_refusing_connect_raises_proxy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore raises ProxyError for a CONNECT answered non-2xx (httpcore/_async/http_proxy.py);
    aiohttp raises ClientHttpProxyError, a ClientResponseError (aiohttp/client_exceptions.py:149),
    which the transport must tell from an answer that is not HTTP."""

    async def refuse(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.head(reader)
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    target = f"https://127.0.0.1:{free_port()}"
    got = {}
    for stack in get_args(Stack):
        async with scripted(refuse) as (wire, proxy):
            monkeypatch.setenv("HTTPS_PROXY", proxy)
            got[stack] = await outcome(target, stack)
            assert wire.requests[0].startswith(b"CONNECT 127.0.0.1:")
    assert got["httpx"] is httpx.ProxyError
    assert got["aiohttp"] is got["httpx"]


# --- Failures and timeouts. ---------------------------------------------------------------------------


async def test_an_unsupported_scheme_raises_unsupported_protocol() -> None:
    """aiohttp's NonHttpUrlClientError is no InvalidURL (aiohttp/client_exceptions.py:345)."""
    url = f"ftp://127.0.0.1:{free_port()}"
    got = {stack: await outcome(url, stack) for stack in get_args(Stack)}
    assert got["httpx"] is httpx.UnsupportedProtocol
    assert got["aiohttp"] is got["httpx"]


async def test_waiting_for_a_pooled_connection_times_out_as_pool_timeout() -> None:
    """httpx's `pool` timeout bounds the wait for a free connection and raises PoolTimeout; the
    transport puts it in aiohttp's `connect`, whose expiry is ConnectionTimeoutError
    (aiohttp/connector.py:643, aiohttp/client.py:858-863), translated to ConnectTimeout."""

    async def held(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.request(reader)
        await wire.release.wait()
        writer.write(answer(BODY))
        await writer.drain()
        await reader.read()

    timeout = httpx.Timeout(5.0, pool=0.3)
    made: dict[str, Callable[[str], httpx.AsyncClient]] = {
        "aiohttp": lambda url: httpx.AsyncClient(base_url=url, transport=AiohttpTransport(limit=1), timeout=timeout),
        "httpx": lambda url: httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=1), timeout=timeout),
    }
    got = {}
    for stack, make in made.items():
        async with scripted(held) as (wire, url), make(url) as c:
            first = asyncio.create_task(c.get("/first"))
            await asyncio.wait_for(wire.arrived.wait(), 5)
            try:
                await c.get("/second")
                got[stack] = None
            except httpx.TimeoutException as error:
                got[stack] = type(error)
            wire.release.set()
            assert (await first).status_code == 200
    assert got["httpx"] is httpx.PoolTimeout
    assert got["aiohttp"] is got["httpx"]


# aiohttp warns of a large bytes body (aiohttp/payload.py), and the transport always hands it bytes.
@pytest.mark.filterwarnings("ignore:Sending a large body directly:ResourceWarning")
@stacks
async def test_a_peer_not_reading_the_request_body_raises_write_timeout(stack: Stack) -> None:
    """httpx bounds each write by its `write` timeout; aiohttp has no write timeout and starts
    sock_read only once the body is written (aiohttp/client_reqrep.py:1620-1624), so with
    total=None the request waits for ever."""

    async def deaf(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.head(reader)
        await wire.release.wait()  # never reads the body

    async with scripted(deaf) as (wire, url), client(url, stack, timeout=0.5) as c:
        try:
            await asyncio.wait_for(c.post("/api/v1/query", content=b"x" * (32 << 20)), 5)
            got: object = "answered"
        except httpx.TransportError as error:
            got = type(error)
        except TimeoutError:
            got = "still waiting after 5s"
        wire.release.set()
    assert got is httpx.WriteTimeout


@stacks
async def test_a_read_timeout_is_a_read_timeout(stack: Stack) -> None:
    async def silent(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.request(reader)
        await reader.read()

    async with scripted(silent) as (_, url), client(url, stack, timeout=0.3) as c:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(httpx.ReadTimeout):
            await c.post("/api/v1/query", data={"query": "up"})
        assert 0.25 < loop.time() - start < 1.5


async def test_a_get_the_peer_dropped_is_not_sent_again() -> None:
    """httpcore sends a request once; aiohttp re-sends an idempotent one on a fresh connection when
    a reused one fails (aiohttp/client.py:903-912). The source's own retries come on top of that."""

    async def drops_the_second(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wire.request(reader)
        if wire.connections == 1:
            writer.write(answer(BODY))
            await writer.drain()
            await wire.request(reader)  # and hang up without answering
            return
        writer.write(answer(BODY))
        await writer.drain()
        await reader.read()

    got = {}
    for stack in get_args(Stack):
        async with scripted(drops_the_second) as (wire, url), client(url, stack) as c:
            await c.get("/one")
            try:
                second: object = (await c.get("/two")).status_code
            except httpx.TransportError as error:
                second = type(error)
            got[stack] = (second, len(wire.requests))
    assert got["httpx"] == (httpx.RemoteProtocolError, 2)
    assert got["aiohttp"] == got["httpx"]


# --- Cancellation and closing. ------------------------------------------------------------------------


def _complaints(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: seen.append(context))
    return seen


@stacks
@pytest.mark.parametrize("when", ["before-the-head", "mid-body"])
async def test_a_cancelled_query_closes_its_connection_and_the_next_one_works(stack: Stack, when: str) -> None:
    async def stalls_first(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung = asyncio.Event()
        wire.hung_up.append(hung)
        await wire.request(reader)
        if wire.connections == 1:
            if when == "mid-body":
                writer.write(answer(BODY)[:-5])
                await writer.drain()
            await reader.read()
            hung.set()
            return
        writer.write(answer(BODY))
        await writer.drain()
        await reader.read()
        hung.set()

    loop = asyncio.get_running_loop()
    complaints = _complaints(loop)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with scripted(stalls_first) as (wire, url):
                async with client(url, stack) as c:
                    task = asyncio.create_task(c.post("/api/v1/query", data={"query": "up"}))
                    await asyncio.wait_for(wire.arrived.wait(), 5)
                    await asyncio.sleep(0.05)
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                    await asyncio.wait_for(wire.hung_up[0].wait(), 2)  # the connection was dropped
                    assert (await c.post("/api/v1/query", data={"query": "up"})).status_code == 200
                await asyncio.wait_for(wire.hung_up[1].wait(), 2)
                assert wire.connections == 2
            gc.collect()
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert complaints == []
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []

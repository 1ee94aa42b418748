"""httpx requests carried by aiohttp's connection pool: the Prometheus client's default transport.

Why not httpx's own (httpcore): picking a connection costs httpcore a pass over every pooled
connection per request, and a poll(2) of each to see whether it went stale, so a diagnosis whose
twenty queries run at once spends more CPU choosing sockets than decoding answers (bench/transport.py
measures both in one run). aiohttp keeps idle connections in a per-host deque and takes the newest.

The client above stays httpx: auth, headers, base URL, timeouts and response decoding are its own,
and respx's `using="httpx"` mocker intercepts requests before any transport. This module only moves
bytes, and raises httpx's exceptions, so nothing above it knows aiohttp is there.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import httpx
from yarl import URL

# aiohttp's own default is 15s; httpx's (keepalive_expiry) 5s. Prometheus keeps an idle connection
# for its --web.read-timeout (5m), proxies in between often far less: the shorter the safer.
KEEPALIVE = 5.0
# Connections to one Prometheus at once, as httpx's default limit; more queries wait for one.
LIMIT = 100
HEAD = 100 * 1024


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session, opened on the first request (inside the running loop) and closed with
    the client. HTTP(S)_PROXY, ALL_PROXY and NO_PROXY from the environment apply, as with httpx's
    transport (http:// proxies; aiohttp speaks no SOCKS).

    Made for what the Prometheus source sends: GET and POST with a body read whole (a form), one
    answer read whole. httpx's four timeouts hold: `pool` waiting for one of `limit` connections,
    `connect` opening it, `read` between bytes of the answer, and `write` (with `read`) as a bound
    on the time until the answer's head, which is what a peer that stops reading would exceed."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None, limit: int = LIMIT) -> None:
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        # The pool's bound is kept here, not by aiohttp, so that waiting for a connection is told
        # apart from opening one (aiohttp's `connect` timeout covers both).
        self._slots = asyncio.Semaphore(limit)
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str], str | None] = {}

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0, keepalive_timeout=KEEPALIVE, ssl=self._ssl, timeout_ceil_threshold=math.inf
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # Not aiohttp's trust_env: besides the proxy variables it reads ~/.netrc on a worker
                # thread before every request without credentials, and adds what it finds (httpx
                # reads no netrc). The proxy is looked up here instead (`_proxy`).
                trust_env=False,
                # httpx decodes gzip itself (it asked for it); cookies and redirects are its too.
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None),
                skip_auto_headers=("Content-Type",),  # httpx's headers go as they are
                # httpcore (h11) takes an answer's head up to 100 KiB, however it is split.
                max_line_size=HEAD,
                max_field_size=HEAD,
                max_headers=HEAD,
            )
            # aiohttp sends a GET again, at once, when a kept-alive connection fails under it; httpx
            # does not, and the source's own retries (counted, backed off) are the only ones.
            self._session._retry_connection = False
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        pool, write, read = timeout.get("pool"), timeout.get("write"), timeout.get("read")
        limits = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout.get("connect"), sock_read=read, ceil_threshold=math.inf
        )
        body = await request.aread()
        # Sent whole, with its Content-Length: a chunked encoding httpx chose for a stream would
        # otherwise be announced for a body that is not chunked.
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "transfer-encoding"]
        head = asyncio.timeout(None if write is None or read is None else write + read)
        try:
            async with self._slot(pool, request):
                try:
                    async with head:
                        answer = await self._open().request(
                            request.method,
                            URL(str(request.url), encoded=True),  # httpx has encoded it; not twice
                            headers=headers,
                            data=body or None,
                            allow_redirects=False,
                            timeout=limits,
                            proxy=self._proxy(request.url),
                        )
                except TimeoutError as error:
                    if not head.expired():
                        raise
                    raise httpx.WriteTimeout(
                        "no answer's head within the write and read timeouts", request=request
                    ) from error
                try:
                    content = await answer.read()
                finally:
                    answer.release()  # back to the pool when read to its end, else closed
        except aiohttp.ClientError as error:
            raise _translated(error, request) from error
        except TimeoutError as error:  # none of httpx's timeouts: one aiohttp did not wrap
            raise httpx.ReadTimeout(str(error) or "timed out", request=request) from error
        version = f"HTTP/{answer.version.major}.{answer.version.minor}" if answer.version else "HTTP/1.1"
        return httpx.Response(
            answer.status,
            headers=list(answer.raw_headers),
            stream=httpx.ByteStream(content),  # not content=: that would add a Content-Length
            request=request,
            extensions={"http_version": version.encode(), "reason_phrase": (answer.reason or "").encode()},
        )

    @asynccontextmanager
    async def _slot(self, pool: float | None, request: httpx.Request) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(pool):
                await self._slots.acquire()
        except TimeoutError as error:
            raise httpx.PoolTimeout(f"no connection free within {pool:g}s", request=request) from error
        try:
            yield
        finally:
            self._slots.release()

    def _proxy(self, url: httpx.URL) -> str | None:
        """The proxy the environment names for this URL's scheme, unless NO_PROXY exempts its host;
        read once per origin (the environment is the process's, set before it started)."""
        origin = (url.scheme, url.host)
        if origin not in self._proxies:
            found = urllib.request.getproxies_environment()
            proxy = found.get(url.scheme) or found.get("all")
            if proxy is not None and "://" not in proxy:
                proxy = f"http://{proxy}"  # as httpx reads a bare host:port
            bypassed = proxy is not None and urllib.request.proxy_bypass(url.host)
            self._proxies[origin] = None if bypassed else proxy
        return self._proxies[origin]

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _translated(error: aiohttp.ClientError, request: httpx.Request) -> httpx.TransportError:
    """The httpx exception a failure on the wire would have raised there; aiohttp's text kept."""
    text = str(error) or type(error).__name__
    kind: type[httpx.TransportError]
    if isinstance(error, aiohttp.ConnectionTimeoutError):  # before ServerTimeoutError, its base
        kind = httpx.ConnectTimeout
    elif isinstance(error, aiohttp.ServerTimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(error, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        kind = httpx.ProxyError  # the proxy unreachable, or refusing the tunnel
    elif isinstance(error, aiohttp.ClientConnectorError):  # refused, unresolvable, TLS handshake
        kind = httpx.ConnectError
    elif isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        kind = httpx.RemoteProtocolError  # closed before the answer or in its body, or not HTTP
    elif isinstance(error, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        kind = httpx.UnsupportedProtocol
    elif isinstance(error, aiohttp.ClientConnectionResetError):  # the request's write, cut
        kind = httpx.WriteError
    elif isinstance(error, aiohttp.ClientOSError | aiohttp.ClientConnectionError):  # reset, broken pipe
        kind = httpx.ReadError
    else:
        kind = httpx.TransportError
    return kind(text, request=request)


def tls(verify: bool | str, cert: tuple[str, str] | None) -> ssl.SSLContext:
    """The TLS context for either stack: httpx's own defaults (its CA bundle), or the CA file or
    directory `verify` names, or no verification; with the client certificate when there is one.
    (httpx 0.28 deprecated building it from a path itself.)"""
    if verify is True:
        context = httpx.create_ssl_context()
    elif verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif Path(verify).is_dir():
        context = ssl.create_default_context(capath=verify)
    else:
        context = ssl.create_default_context(cafile=verify)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context

"""A scripted HTTP/1.1 peer on loopback, for the transport's tests: a few lines of asyncio that
answer as a script says, so that a reset, a half-sent body or a silent peer is made on purpose.
Its connections' handlers end with it."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

Script = Callable[["Wire", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Wire:
    """Runs `script` on each connection; keeps the requests, and whether the client hung up."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.hung_up: list[asyncio.Event] = []
        self.arrived = asyncio.Event()  # a request (or its head) came in
        self.release = asyncio.Event()  # for scripts that hold an answer until told
        self.closed = asyncio.Event()  # a connection's handler ended
        self.tasks: set[asyncio.Task[Any]] = set()

    async def head(self, reader: asyncio.StreamReader) -> bytes:
        """A request's head alone, kept."""
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head)
        self.arrived.set()
        return head

    async def request(self, reader: asyncio.StreamReader) -> bytes:
        """A request's head and its Content-Length of body, kept."""
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(x.split(b":", 1)[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length:")),
            0,
        )
        sent = head + await reader.readexactly(length)
        self.requests.append(sent)
        self.arrived.set()
        return sent

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.connections += 1
        try:
            await self.script(self, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.closed.set()


@asynccontextmanager
async def scripted(script: Script, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[Wire, str]]:
    """The peer on a free loopback port, and its URL (https with `ssl_context`)."""
    wire = Wire(script)
    server = await asyncio.start_server(wire._serve, "127.0.0.1", 0, ssl=ssl_context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield wire, f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()
        for task in wire.tasks:
            task.cancel()
        await asyncio.gather(*wire.tasks, return_exceptions=True)
        await server.wait_closed()


def answer(body: bytes, *headers: str, status: str = "200 OK", version: str = "HTTP/1.1") -> bytes:
    head = [f"{version} {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def answering(*answers: bytes) -> Script:
    """Answers each request on a connection with the next of `answers`, then waits for the client
    to hang up (noted in `hung_up`)."""

    async def script(wire: Wire, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in answers:
            await wire.request(reader)
            writer.write(reply)
            await writer.drain()
        hung = asyncio.Event()
        wire.hung_up.append(hung)
        await reader.read()
        hung.set()

    return script

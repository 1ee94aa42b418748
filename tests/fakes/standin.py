"""A Prometheus stand-in on loopback, in a thread: for faults a process of the daemon's own must
meet (respx reaches this process only), where a real Prometheus will not misbehave on demand."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StandIn:
    """A loopback HTTP server where Prometheus would be, counting requests: each one refused with
    503 and `Retry-After: 30` (Prometheus asking not to be called for 30 s), or, with `hang`, held
    unanswered until the server stops."""

    def __init__(self, *, hang: bool = False) -> None:
        self.seen = 0
        self.hang = hang
        self.release = threading.Event()
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                with lock:
                    outer.seen += 1
                if outer.hang:
                    outer.release.wait(60)
                    return
                body = b'{"status":"error","errorType":"unavailable","error":"overloaded"}'
                self.send_response(503)
                self.send_header("Retry-After", "30")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = answer
            do_POST = answer

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

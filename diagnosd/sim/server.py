"""The live /metrics endpoint of the simulated fleet, on loopback unless told otherwise.

Each scrape first brings the simulation up to the clock (injectable, so tests drive time), then
serves the text format 0.0.4 whatever the client asks for: Prometheus asking for OpenMetrics must
not get colons rewritten (reference trap 1). A background ticker keeps the state current between
scrapes so a scrape after a long pause does not have to catch up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from diagnosd.sim import exporters
from diagnosd.sim.exposition import CONTENT_TYPE, text
from diagnosd.sim.simulator import Simulator

Clock = Callable[[], float]
INDEX = b"diagnosd simulate: the simulated fleet's metrics are at /metrics\n"


class MetricsServer:
    """`with MetricsServer(sim) as server:` serves http://{host}:{port}/metrics until the block ends."""

    def __init__(
        self,
        sim: Simulator,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock = time.time,
        tick_every: float | None = 1.0,
    ) -> None:
        self.sim = sim
        self.clock = clock
        self.tick_every = tick_every
        self.lock = threading.Lock()
        self.scrapes = 0
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def exposition(self) -> bytes:
        with self.lock:
            self.catch_up()
            self.scrapes += 1
            return text(exporters.families(self.sim)).encode("utf-8")

    def catch_up(self) -> None:
        """Advance the simulation to the clock (never backwards)."""
        now = self.clock()
        if now > self.sim.time:
            self.sim.run(now)

    def start(self) -> MetricsServer:
        serve = threading.Thread(target=self._httpd.serve_forever, name="sim-http", daemon=True)
        serve.start()
        self._threads.append(serve)
        if self.tick_every is not None:
            ticker = threading.Thread(target=self._tick, name="sim-ticker", daemon=True)
            ticker.start()
            self._threads.append(ticker)
        return self

    def _tick(self) -> None:
        assert self.tick_every is not None
        while not self._stop.wait(self.tick_every):
            with self.lock:
                self.catch_up()

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _handler(server: MetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def handle(self) -> None:
            # A scraper may hang up mid-answer (Prometheus stopping at the end of a demo, a scrape
            # timeout): there is nobody left to answer, which is no error of the simulator, and
            # socketserver would print a traceback for it.
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, server.exposition(), CONTENT_TYPE)
            elif path in ("/", "/-/healthy", "/-/ready"):
                self._send(200, INDEX, "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: the metrics are at /metrics\n", "text/plain; charset=utf-8")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler

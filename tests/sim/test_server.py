"""The simulator's /metrics server: a scraper that hangs up mid-answer leaves no traceback behind."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from diagnosd.sim.server import MetricsServer
from tests.sim.conftest import ANCHOR, short


def test_a_client_closing_mid_response_leaves_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    conns: list[socket.socket] = []
    handlers: list[threading.Thread] = []
    hung_up = threading.Event()

    def clock() -> float:
        # Called by the handler while it builds the answer: the scraper resets the connection
        # right then (SO_LINGER 0 sends an RST), so the answer is written to a peer that is gone.
        handlers.append(threading.current_thread())
        conns[0].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conns[0].close()
        hung_up.set()
        return ANCHOR - 7200.0

    with MetricsServer(short("healthy", run=False), clock=clock, tick_every=None) as server:
        conns.append(socket.create_connection((server.host, server.port)))
        conns[0].sendall(b"GET /metrics HTTP/1.1\r\nHost: sim\r\n\r\n")
        assert hung_up.wait(30)
        handlers[0].join(30)
        assert not handlers[0].is_alive()
        assert server.scrapes == 1  # the answer was built, then found nobody to take it
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err
    assert "ConnectionResetError" not in err

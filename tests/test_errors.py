"""Every error of the hierarchy survives pickling whole, message and data: an alert batch's
diagnosis process sends its errors back to the daemon that way (daemon/alertmanager/offload.py)."""

from __future__ import annotations

import pickle

import pytest

from diagnosd import errors
from diagnosd.errors import DiagnosdError, Problem

PROBLEM = Problem("rules/queue_backlog.yaml", 12, "nodes[0].query", "unknown param $window")
URL = "http://127.0.0.1:9090"
SAMPLES: dict[type[DiagnosdError], DiagnosdError] = {
    errors.RulesError: errors.RulesError([PROBLEM]),
    errors.UnknownSymptom: errors.UnknownSymptom("ttft_hgih", ["ttft_high", "queue_backlog"]),
    errors.ScopeError: errors.ScopeError("pod name", "not a label name"),
    errors.UsageError: errors.UsageError("--at", "not a time"),
    errors.ScenarioError: errors.ScenarioError("gpu_oom", [PROBLEM]),
    errors.ParamError: errors.ParamError("queue_backlog", "window", "not a duration"),
    errors.NotationError: errors.NotationError("1+1x3 oops"),
    errors.ServerError: errors.ServerError("promtool not on PATH"),
    errors.SourceError: errors.SourceError("boom", url=URL, query="up", status=502),
    errors.SourceUnavailable: errors.SourceUnavailable("503", url=URL, query="up", status=503, retry_after=2.5),
    errors.CircuitOpen: errors.CircuitOpen("open", url=URL, query="up", failures=5, last="refused", retry_after=9.0),
    errors.SourceTimeout: errors.SourceTimeout("no answer in 5s", url=URL, query="up"),
    errors.DeadlineExceeded: errors.DeadlineExceeded("past the deadline", url=URL, query="up"),
    errors.QueryRejected: errors.QueryRejected("bad_data: parse error", url=URL, query="up{", status=400),
    errors.SourceProtocolError: errors.SourceProtocolError("not JSON", url=URL, status=200),
    errors.SettingsError: errors.SettingsError([PROBLEM]),
    errors.StoreError: errors.StoreError("/var/lib/diagnosd/findings.db", "disk full"),
    errors.FindingNotFound: errors.FindingNotFound("f-123"),
    errors.RequestError: errors.RequestError("at", "not a time"),
    errors.DiagnosisProcessLost: errors.DiagnosisProcessLost("queue_backlog", "terminated abruptly"),
    errors.QueueFull: errors.QueueFull(256, 3),
    errors.Unauthorized: errors.Unauthorized("bearer", "wrong token"),
    errors.SinkError: errors.SinkError("alertmanager", URL, "HTTP 500", status=500, retry=True),
}


def every_error() -> set[type[DiagnosdError]]:
    found: set[type[DiagnosdError]] = set()
    todo = [DiagnosdError]
    while todo:
        for kind in todo.pop().__subclasses__():
            if kind.__module__ == errors.__name__:
                found.add(kind)
                todo.append(kind)
    return found


def test_every_error_has_a_sample() -> None:
    assert every_error() == set(SAMPLES)


@pytest.mark.parametrize("kind", sorted(SAMPLES, key=str))
def test_an_error_pickles_with_its_message_and_data(kind: type[DiagnosdError]) -> None:
    error = SAMPLES[kind]
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is kind
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)  # the data (none for the errors that are a message alone)
    assert str(back)

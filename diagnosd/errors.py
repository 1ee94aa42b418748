"""The one error hierarchy of diagnosd; every error carries the data that explains it.

DiagnosdError
├── RulesError            trees that failed to load (every Problem at once)
├── UnknownSymptom        a symptom id no loaded tree has
├── ScopeError            a scope label name that is not a valid label, or a bad matcher
├── ScenarioError         a simulator scenario that cannot be loaded (every Problem at once)
├── ParamError            a tree param override that does not fit (its tree, name and why)
├── NotationError         a series test's promtool notation that cannot be read
├── ServerError           a local Prometheus or promtool that is missing, fails or never gets ready
└── SourceError           the query source failed (carries the PromQL and the URL)
    ├── SourceUnavailable     could not connect at all, or Prometheus cannot serve now (503, 429)
    │   └── CircuitOpen           not asked: the circuit is open after repeated failures
    ├── SourceTimeout         no answer within the per-query timeout
    │   └── DeadlineExceeded      no answer by the diagnosis's own deadline
    ├── QueryRejected         Prometheus refused the query (bad_data, 4xx)
    └── SourceProtocolError   an answer that is not what the HTTP API promises
SettingsError             daemon settings that cannot be used (every Problem at once, no secret echoed)
StoreError                the findings store cannot be opened or written (carries its path)
FindingNotFound           no finding has this id
RequestError              a request parameter that cannot be read (its name and why)
DiagnosisProcessLost      the process diagnosing an alert batch died before it answered (retried)
QueueFull                 the alert queue cannot take a delivery now (Alertmanager retries)
Unauthorized              missing or wrong credentials (never carries them)
SinkError                 Alertmanager or Grafana did not take a finding (its sink, URL, status; retried or not)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class DiagnosdError(Exception):
    """Base of every error diagnosd raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled whole, data included (an alert batch's diagnosis process sends its errors back):
        # Exception's own reduce calls __init__ again with the message alone, which these refuse.
        return _rebuilt, (type(self), self.args, dict(vars(self)))


def _rebuilt(kind: type[DiagnosdError], args: tuple[object, ...], data: dict[str, object]) -> DiagnosdError:
    error = kind.__new__(kind)
    error.args = args
    vars(error).update(data)
    return error


@dataclass(frozen=True)
class Problem:
    """One reason a rules file cannot be loaded, located precisely."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        path = f" {self.path}:" if self.path else ""
        return f"{where}:{path} {self.message}"


class RulesError(DiagnosdError):
    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = "\n".join(str(p) for p in self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in rules:\n{lines}")


class UnknownSymptom(DiagnosdError):
    def __init__(self, symptom: str, known: Sequence[str]) -> None:
        self.symptom = symptom
        self.known = tuple(known)
        super().__init__(f"unknown symptom {symptom!r}; known symptoms: {', '.join(self.known)}")


class ScopeError(DiagnosdError):
    def __init__(self, label: str, reason: str) -> None:
        self.label = label
        self.reason = reason
        super().__init__(f"bad scope label {label!r}: {reason}")


class UsageError(DiagnosdError):
    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        super().__init__(f"{option}: {reason}")


class ScenarioError(DiagnosdError):
    def __init__(self, scenario: str, problems: Sequence[Problem]) -> None:
        self.scenario = scenario
        self.problems = tuple(problems)
        lines = "\n".join(str(p) for p in self.problems)
        super().__init__(f"scenario {scenario!r} cannot be used:\n{lines}")


class ParamError(DiagnosdError):
    def __init__(self, tree: str, name: str, reason: str) -> None:
        self.tree, self.name, self.reason = tree, name, reason
        super().__init__(f"param {tree}.{name}: {reason}")


class NotationError(DiagnosdError, ValueError):
    """A ValueError too: a value that cannot be read, like float('x')."""


class ServerError(DiagnosdError):
    """Running a local Prometheus or promtool failed; the message says which and why."""


class SourceError(DiagnosdError):
    def __init__(self, message: str, *, url: str, query: str | None = None, status: int | None = None) -> None:
        self.url = url
        self.query = query
        self.detail = message
        # The HTTP status Prometheus (or a proxy before it) answered with; None without an answer.
        self.status = status
        suffix = f" (query: {query})" if query else ""
        super().__init__(f"{message} [{url}]{suffix}")


class SourceUnavailable(SourceError):
    def __init__(
        self,
        message: str,
        *,
        url: str,
        query: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, url=url, query=query, status=status)
        # Seconds from the failure until Prometheus asked (Retry-After), or the circuit allows, a call.
        self.retry_after = retry_after


class CircuitOpen(SourceUnavailable):
    """Refused without sending: the circuit around Prometheus is open (or probing) after `failures`
    consecutive failed calls; `last` is what the last of them said."""

    def __init__(
        self, message: str, *, url: str, query: str | None, failures: int, last: str, retry_after: float | None
    ) -> None:
        super().__init__(message, url=url, query=query, retry_after=retry_after)
        self.failures = failures
        self.last = last


class SourceTimeout(SourceError):
    pass


class DeadlineExceeded(SourceTimeout):
    """A timeout of the whole diagnosis, not of one query: its own reason in the self-metrics."""


class QueryRejected(SourceError):
    pass


class SourceProtocolError(SourceError):
    pass


class SettingsError(DiagnosdError):
    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = "\n".join(str(p) for p in self.problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in settings:\n{lines}")


class StoreError(DiagnosdError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"findings store {path}: {reason}")


class FindingNotFound(DiagnosdError):
    def __init__(self, finding_id: str) -> None:
        self.finding_id = finding_id
        super().__init__(f"no finding {finding_id!r}")


class RequestError(DiagnosdError):
    def __init__(self, parameter: str, reason: str) -> None:
        self.parameter = parameter
        self.reason = reason
        super().__init__(f"{parameter}: {reason}")


class DiagnosisProcessLost(DiagnosdError):
    """The process diagnosing an alert batch died (killed, out of memory) before it answered."""

    def __init__(self, symptom: str, detail: str) -> None:
        self.symptom = symptom
        self.detail = detail
        super().__init__(f"the diagnosis process died while diagnosing {symptom} ({detail}); retried later")


class QueueFull(DiagnosdError):
    def __init__(self, capacity: int, needed: int) -> None:
        self.capacity = capacity
        self.needed = needed
        super().__init__(f"alert queue full ({capacity} jobs): cannot take {needed} more now, retry later")


class Unauthorized(DiagnosdError):
    def __init__(self, scheme: str, reason: str) -> None:
        self.scheme = scheme
        self.reason = reason
        super().__init__(reason)


class SinkError(DiagnosdError):
    """A sink could not hand findings over. `retry`: worth trying again (down, timeout, 5xx, 429);
    otherwise the receiver refused them for good (another 4xx) and trying again changes nothing."""

    def __init__(self, sink: str, url: str, reason: str, *, status: int | None = None, retry: bool = True) -> None:
        self.sink = sink
        self.url = url
        self.reason = reason
        self.status = status
        self.retry = retry
        super().__init__(f"{sink} {url}: {reason}")

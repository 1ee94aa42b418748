"""Alertmanager webhook payloads (version 4) into diagnosis requests, one per distinct alert state.

Each alert is judged on its own status (a firing group may hold resolved alerts), names its
symptom by a `symptom` label or through the alertname map, and lends the scope its target labels
plus the configured scope labels. Everything else an alert carries (alertname, severity, job,
instance, rule and external labels) stays out of the scope: see docs/daemon.md for why.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from diagnosd.engine.scope import Scope
from diagnosd.errors import RequestError, ScopeError
from diagnosd.sinks.alertmanager import ALERTNAME as DERIVED_ALERTNAME
from diagnosd.trees.model import Tree

SYMPTOM_LABEL = "symptom"
# The one payload version Alertmanager has sent since 0.8; another would be read wrongly.
VERSION = "4"
# Alertmanager's "no end" for a firing alert.
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
# What Go's time.RFC3339Nano writes: pydantic alone would also take Unix numbers and bare dates.
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339(value: object) -> object:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not RFC3339.fullmatch(value):
        raise ValueError("expected an RFC3339 time string such as 2026-11-29T14:00:00Z")
    return value


Rfc3339 = Annotated[datetime, BeforeValidator(_rfc3339)]


def _json_integer(value: object) -> object:
    """A JSON Schema integer: a number with no fractional part (5 or 5.0), never `true` or `"5"`,
    which lax validation would take for one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("expected an integer")
        return int(value)
    return value


JsonInteger = Annotated[int, BeforeValidator(_json_integer)]


class _Tolerant(BaseModel):
    """Newer Alertmanager versions add fields: ignore what is not read here."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Alert(_Tolerant):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: Rfc3339
    endsAt: Rfc3339 | None = None
    generatorURL: str = ""
    fingerprint: str = ""

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """In UTC. A time UTC cannot hold (year 1 at +01:00, year 9999 at -01:00) is valid RFC 3339,
        so it is taken, held at the first or last moment UTC has (year 1 is Alertmanager's "no end"
        anyway), where converting it would raise OverflowError."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            return (datetime.min if value.year == datetime.min.year else datetime.max).replace(tzinfo=UTC)

    @property
    def ends_at(self) -> datetime | None:
        """None for the 0001-01-01 that a firing alert carries."""
        return None if self.endsAt is None or self.endsAt <= ZERO_TIME else self.endsAt

    @property
    def identity(self) -> str:
        """Alertmanager's fingerprint, or one of the labels when a sender left it out."""
        if self.fingerprint:
            return self.fingerprint
        text = "\x00".join(f"{k}\x00{v}" for k, v in sorted(self.labels.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


class Payload(_Tolerant):
    # The one version read is a constant of the schema; another is refused with 400 (check_version).
    version: str = Field(json_schema_extra={"const": VERSION})
    status: Literal["firing", "resolved"]
    receiver: str = ""
    groupKey: str = ""
    truncatedAlerts: JsonInteger = Field(default=0, ge=0)
    groupLabels: dict[str, str] = {}
    commonLabels: dict[str, str] = {}
    commonAnnotations: dict[str, str] = {}
    externalURL: str = ""
    alerts: list[Alert]


class Skip(StrEnum):
    UNMAPPED = "unmapped"  # no symptom label and an alertname the map does not know
    UNKNOWN_SYMPTOM = "unknown_symptom"  # names a symptom no loaded tree has
    BAD_SCOPE = "bad_scope"  # a scope label value no query may carry (too long, not unicode)
    # diagnosd's own derived alert, routed back here: diagnosing it would diagnose a diagnosis, and
    # its finding would post it again (a loop). It carries `symptom`, so the check comes first.
    OWN_ALERT = "own_alert"


def check_version(payload: Payload) -> None:
    """Refuses a payload of another version than the one whose fields this module reads."""
    if payload.version != VERSION:
        raise RequestError("version", f"payload version {payload.version!r} is not supported; expected {VERSION!r}")


@dataclass(frozen=True)
class AlertJob:
    """One distinct alert state to act on: diagnose it (firing) or resolve what it caused."""

    fingerprint: str
    status: str
    starts_at: str
    alertname: str
    symptom: str
    scope: Mapping[str, str]
    received_at: datetime

    @property
    def key(self) -> tuple[str, str, str]:
        return self.fingerprint, self.status, self.starts_at

    @property
    def resolved(self) -> bool:
        return self.status == "resolved"

    def as_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "status": self.status,
            "starts_at": self.starts_at,
            "alertname": self.alertname,
            "symptom": self.symptom,
            "scope": dict(self.scope),
            "received_at": self.received_at.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertJob:
        return cls(
            fingerprint=data["fingerprint"],
            status=data["status"],
            starts_at=data["starts_at"],
            alertname=data["alertname"],
            symptom=data["symptom"],
            scope=dict(data["scope"]),
            received_at=datetime.fromisoformat(data["received_at"]),
        )


@dataclass(frozen=True)
class Skipped:
    fingerprint: str
    alertname: str
    reason: Skip
    detail: str


@dataclass(frozen=True)
class Plan:
    jobs: tuple[AlertJob, ...]
    skipped: tuple[Skipped, ...]


def plan(
    payload: Payload,
    trees: Mapping[str, Tree],
    alertname_map: Mapping[str, str],
    scope_labels: Sequence[str],
    received_at: datetime,
) -> Plan:
    """The jobs a delivery asks for, each distinct alert state once, and the alerts left aside."""
    jobs: dict[tuple[str, str, str], AlertJob] = {}
    skipped: list[Skipped] = []
    for alert in payload.alerts:
        alertname = alert.labels.get("alertname", "")
        if alertname == DERIVED_ALERTNAME:
            skipped.append(Skipped(alert.identity, alertname, Skip.OWN_ALERT, "diagnosd's own derived alert"))
            continue
        symptom = alert.labels.get(SYMPTOM_LABEL) or alertname_map.get(alertname)
        if symptom is None:
            skipped.append(Skipped(alert.identity, alertname, Skip.UNMAPPED, "no symptom label, alertname not mapped"))
            continue
        tree = trees.get(symptom)
        if tree is None:
            skipped.append(Skipped(alert.identity, alertname, Skip.UNKNOWN_SYMPTOM, f"no tree for {symptom!r}"))
            continue
        labels = scope(alert.labels, tree, scope_labels)
        try:
            Scope.of(labels)
        except ScopeError as error:
            # Refused here, once, not retried by the workers up to max_attempts.
            skipped.append(Skipped(alert.identity, alertname, Skip.BAD_SCOPE, str(error)))
            continue
        job = AlertJob(
            fingerprint=alert.identity,
            status=alert.status,
            starts_at=alert.startsAt.isoformat(),
            alertname=alertname,
            symptom=symptom,
            scope=labels,
            received_at=received_at,
        )
        jobs.setdefault(job.key, job)
    return Plan(tuple(jobs.values()), tuple(skipped))


def scope(labels: Mapping[str, str], tree: Tree, scope_labels: Sequence[str]) -> dict[str, str]:
    """The alert's labels that name what to diagnose: the tree's target labels, then scope_labels."""
    wanted = [*tree.target, *(name for name in scope_labels if name not in tree.target)]
    return {name: labels[name] for name in wanted if labels.get(name)}

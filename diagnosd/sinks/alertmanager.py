"""Derived alerts: each firing finding becomes the Alertmanager alert `DiagnosdRootCause`, posted to
/api/v2/alerts of every configured Alertmanager (HA: each on its own queue, so one down delays
none of the others).

The client contract is Prometheus's: an active alert is re-sent every resend interval with
endsAt = now + 4 x that interval (Alertmanager resolves it on its own if diagnosd goes away), and
sent once more with endsAt = its resolution when the finding resolves. endsAt is computed when the
post leaves, not when it was queued, so an alert that waited out an outage is not already over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from diagnosd.findings.lifecycle import Finding
from diagnosd.moments import utc_now
from diagnosd.sinks.outbox import Backoff, Outbox, Running, Send, pump, request
from diagnosd.sinks.watch import Describe, Look, PostCount, Wake, Watch, keep_looking

log = logging.getLogger(__name__)

ALERTNAME = "DiagnosdRootCause"
SINK = "alertmanager"
# How many alerts one post carries (Prometheus's notifier sends batches of 256 at most).
BATCH = 64


@dataclass(frozen=True)
class AlertmanagerConfig:
    urls: tuple[str, ...]
    resend_interval: timedelta = timedelta(minutes=1)
    timeout: float = 10.0
    bearer_token: str | None = None
    queue_size: int = 10_000
    # The daemon's own address as people reach it: generatorURL is <external_url>/findings/<id>.
    external_url: str | None = None
    # The first wait after a failed post; doubled each time up to the resend interval.
    backoff: float = 1.0


@dataclass(frozen=True)
class Update:
    finding: Finding
    # None while firing; the moment diagnosd saw it resolve otherwise.
    resolved_at: datetime | None = None


def postable(u: Update, now: datetime, config: AlertmanagerConfig, describe: Describe) -> dict[str, Any]:
    """The postableAlert of api/v2/openapi.yaml for one update, as of `now`."""
    f = u.finding
    words = describe(f)
    starts = f.phase.fired_at or f.phase.active_at
    ends = u.resolved_at if u.resolved_at is not None else now + 4 * config.resend_interval
    notes = {
        "summary": words.summary,
        "evidence": "\n".join(words.evidence),
        "remediation": "\n".join(words.remediation),
    }
    alert: dict[str, Any] = {
        "labels": labels(f),
        # An empty annotation says nothing (Alertmanager drops it anyway).
        "annotations": {name: text for name, text in notes.items() if text},
        "startsAt": starts.isoformat(),
        # Alertmanager refuses an alert that ends before it starts (a clock behind the finding's).
        "endsAt": max(ends, starts).isoformat(),
    }
    if config.external_url:
        alert["generatorURL"] = f"{config.external_url.rstrip('/')}/findings/{f.fingerprint}"
    return alert


def labels(f: Finding) -> dict[str, str]:
    """alertname, symptom, cause, severity, then the target's labels; a target label that clashes
    with one of those is sent as target_<name>, as diagnosd_root_cause exports it."""
    fixed = {"alertname": ALERTNAME, "symptom": f.symptom, "cause": f.cause, "severity": str(f.severity)}
    return {**fixed, **{(f"target_{k}" if k in fixed else k): v for k, v in f.labels.items() if v}}


class AlertmanagerSink:
    def __init__(
        self,
        config: AlertmanagerConfig,
        active: Callable[[], Iterable[Finding]],
        describe: Describe,
        count: PostCount,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        # The wall clock, not the daemon's evaluation clock: Alertmanager judges endsAt by its own.
        self.config = config
        self.wake = Wake()
        self._watch = Watch(active)
        self._describe = describe
        self._count = count
        self._clock = clock
        self._outboxes = {url: Outbox[Update](config.queue_size, self._counter) for url in config.urls}
        self._running = Running()

    def _counter(self, outcome: str, n: int) -> None:
        self._count(SINK, outcome, n)

    async def start(self) -> None:
        self._running.open(self.config.timeout, self.config.bearer_token)
        self.wake.bind()
        interval = self.config.resend_interval.total_seconds()
        self._running.spawn(keep_looking(self._watch, self.wake, interval, self._seen))
        for url, outbox in self._outboxes.items():
            backoff = Backoff(self.config.backoff, interval)
            self._running.spawn(pump(outbox, self._sender(url), backoff, self._counter, BATCH))
        log.info("derived alerts to %d Alertmanager(s), re-sent every %ss", len(self._outboxes), interval)

    async def stop(self) -> None:
        # Nothing is resolved on the way out: the alerts expire at their endsAt unless a successor
        # (this daemon restarted, its findings reloaded) re-sends them first.
        await self._running.close()

    def _seen(self, look: Look, ticked: bool) -> None:
        resolved_at = self._clock()
        for f in look.ended:
            self._put(Update(f, resolved_at))
        for f in look.firing if ticked else look.started:
            self._put(Update(f))

    def _put(self, update: Update) -> None:
        for outbox in self._outboxes.values():
            outbox.put(update.finding.fingerprint, update)

    def _sender(self, url: str) -> Send[Update]:
        endpoint = f"{url.rstrip('/')}/api/v2/alerts"

        async def send(items: list[tuple[str, Update]]) -> None:
            now = self._clock()
            body = [postable(u, now, self.config, self._describe) for _, u in items]
            await request(self._running.client, SINK, "POST", endpoint, body)

        return send

"""Grafana annotations: a region per finding episode through Grafana's HTTP API, opened with
POST /api/annotations when it fires and closed with PATCH /api/annotations/:id (its timeEnd) when
it resolves.

The annotation ids live in memory (the findings store keeps no sink's ids). So that a restart
neither duplicates an open region nor leaves it open for ever, each annotation carries the tag
finding:<fingerprint>, and an episode this process has not annotated is first looked up by that
tag and its start time. Grafana down delays the annotations, never a diagnosis: the work waits in
a bounded queue drained by its own task, with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diagnosd.errors import SinkError
from diagnosd.findings.lifecycle import Finding
from diagnosd.moments import utc_now
from diagnosd.sinks.outbox import Backoff, Outbox, Running, pump, request
from diagnosd.sinks.watch import Describe, Look, PostCount, Wake, Watch, keep_looking

log = logging.getLogger(__name__)

SINK = "grafana"
TAG = "diagnosd"
# A look every so often besides the tracker's nudges, in case one was missed.
TICK = 30.0


@dataclass(frozen=True)
class GrafanaConfig:
    url: str
    token: str | None = None
    # The dashboard the regions belong to; without one they are organization-wide, shown wherever
    # an annotation query asks for the `diagnosd` tag.
    dashboard_uid: str | None = None
    timeout: float = 10.0
    queue_size: int = 10_000
    external_url: str | None = None
    backoff: float = 1.0
    max_backoff: float = 60.0


@dataclass(frozen=True)
class Region:
    finding: Finding
    ended_at: datetime | None = None

    @property
    def episode(self) -> tuple[str, datetime]:
        return self.finding.fingerprint, self.finding.phase.active_at


def millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def tags(f: Finding) -> list[str]:
    return [TAG, f"symptom:{f.symptom}", f"cause:{f.cause}", f"severity:{f.severity}", f"finding:{f.fingerprint}"]


class GrafanaSink:
    def __init__(
        self,
        config: GrafanaConfig,
        active: Callable[[], Iterable[Finding]],
        describe: Describe,
        count: PostCount,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.config = config
        self.wake = Wake()
        self._watch = Watch(active)
        self._describe = describe
        self._count = count
        self._clock = clock
        self._outbox = Outbox[Region](config.queue_size, self._counter)
        # Open regions: episode -> annotation id.
        self._ids: dict[tuple[str, datetime], int] = {}
        self._running = Running()

    def _counter(self, outcome: str, n: int) -> None:
        self._count(SINK, outcome, n)

    async def start(self) -> None:
        self._running.open(self.config.timeout, self.config.token)
        self.wake.bind()
        backoff = Backoff(self.config.backoff, self.config.max_backoff)
        self._running.spawn(keep_looking(self._watch, self.wake, TICK, self._seen))
        self._running.spawn(pump(self._outbox, self._send, backoff, self._counter, 1))
        log.info("finding annotations to Grafana %s", self.config.url)

    async def stop(self) -> None:
        await self._running.close()

    def _seen(self, look: Look, ticked: bool) -> None:
        ended_at = self._clock()
        for f in look.ended:
            self._put(Region(f, ended_at))
        for f in look.started:
            self._put(Region(f))

    def _put(self, region: Region) -> None:
        fp, active_at = region.episode
        # Keyed by episode: a new episode's opening never replaces the closing of the one before.
        self._outbox.put(f"{fp}@{active_at.isoformat()}", region)

    async def _send(self, items: list[tuple[str, Region]]) -> None:
        for _, region in items:
            await self._apply(region)

    async def _apply(self, region: Region) -> None:
        episode = region.episode
        known = self._ids.get(episode)
        if known is None:
            known = await self._find(region)
        if known is None:
            self._ids_put(region, await self._open(region))
        elif region.ended_at is not None:
            await self._close(known, region.ended_at)
            self._ids.pop(episode, None)
        else:
            self._ids[episode] = known

    def _ids_put(self, region: Region, annotation: int) -> None:
        if region.ended_at is None:
            self._ids[region.episode] = annotation

    async def _open(self, region: Region) -> int:
        """POST a region (closed already when the finding resolved before Grafana could be told)."""
        f = region.finding
        body: dict[str, Any] = {"time": millis(self._start(f)), "tags": tags(f), "text": self._text(f)}
        if region.ended_at is not None:
            body["timeEnd"] = millis(max(region.ended_at, self._start(f)))
        if self.config.dashboard_uid:
            body["dashboardUID"] = self.config.dashboard_uid
        answer = await self._call("POST", "/api/annotations", body)
        annotation = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(annotation, int):
            raise SinkError(SINK, self.config.url, "POST /api/annotations answered without an id", retry=False)
        return annotation

    async def _close(self, annotation: int, ended_at: datetime) -> None:
        await self._call("PATCH", f"/api/annotations/{annotation}", {"timeEnd": millis(ended_at)})

    async def _find(self, region: Region) -> int | None:
        """The annotation an earlier process opened for this episode, if any."""
        f = region.finding
        start = millis(self._start(f))
        params = {"tags": [TAG, f"finding:{f.fingerprint}"], "type": "annotation", "from": start, "to": start}
        found = await self._call("GET", "/api/annotations", None, params)
        for item in found if isinstance(found, list) else ():
            if isinstance(item, dict) and item.get("time") == start and isinstance(item.get("id"), int):
                annotation: int = item["id"]
                return annotation
        return None

    async def _call(self, method: str, path: str, body: Any, params: Any = None) -> Any:
        url = self.config.url.rstrip("/") + path
        response = await request(self._running.client, SINK, method, url, body, params)
        try:
            return response.json()
        except ValueError as error:
            raise SinkError(SINK, url, f"{method} answered with something not JSON", retry=False) from error

    @staticmethod
    def _start(f: Finding) -> datetime:
        return f.phase.fired_at or f.phase.active_at

    def _text(self, f: Finding) -> str:
        words = self._describe(f)
        # The cause's own check is the branch's last: its numbers are the top evidence.
        lines = [words.summary, *words.evidence[-1:]]
        if self.config.external_url:
            lines.append(f"{self.config.external_url.rstrip('/')}/findings/{f.fingerprint}")
        return "\n".join(lines)

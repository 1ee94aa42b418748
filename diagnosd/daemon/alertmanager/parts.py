"""Where an alert batch is diagnosed: one evaluation over every target of the batch, cut into each
alert's part (coalesce.part). `OnLoop` does it on the daemon's event loop; `Offloaded`
(offload.py) in processes of their own, so that a storm's diagnoses never hold the webhook's acks.

Both raise what Diagnoser.diagnose raises (QueryRejected, SourceError, UnknownSymptom...), and
Offloaded DiagnosisProcessLost when its process died: the inbox decides from the error what
becomes of the batch's alerts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from diagnosd.daemon.alertmanager.coalesce import part
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis

# Each part reads every target of the batch's diagnosis: the event loop turns after this many.
PART_SLICE = 16


class Parting(Protocol):
    async def parts(
        self, symptom: str, scope: Scope, at: datetime, scopes: Sequence[Mapping[str, str]]
    ) -> list[Diagnosis]:
        """The diagnosis of `symptom` over `scope` at `at`, cut into one part per alert scope of
        `scopes` (in their order)."""
        ...

    async def close(self) -> None: ...


class OnLoop:
    """Diagnoses on the event loop it runs on: the daemon's (a source injected into this process;
    0 processes), or a diagnosis process's own (offload.py)."""

    def __init__(self, diagnoser: Diagnoser) -> None:
        self._diagnoser = diagnoser

    async def parts(
        self, symptom: str, scope: Scope, at: datetime, scopes: Sequence[Mapping[str, str]]
    ) -> list[Diagnosis]:
        tree = self._diagnoser.tree(symptom)
        looked = await self._diagnoser.diagnose(tree, scope, at, Trigger.ALERT)
        parts: list[Diagnosis] = []
        for done, alert in enumerate(scopes, 1):
            parts.append(part(looked.diagnosis, alert))
            if done % PART_SLICE == 0:
                await asyncio.sleep(0)  # the webhook is served in between
        return parts

    async def close(self) -> None:
        return None

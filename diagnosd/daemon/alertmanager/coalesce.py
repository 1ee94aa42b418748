"""Alert storms coalesced: the firing alerts of one symptom that arrive within one window are
diagnosed by a single evaluation over all their targets, and each alert then takes its own part.

The engine evaluates a tree over every target of a scope at once (one query per check, whatever
the number of targets), so a storm of N alerts of one symptom costs one evaluation instead of N.
The batch's scope covers its alerts' scopes: each label they all hold, with every value they hold
it with (`pod` any of the alerting pods), so that the queries read, and the engine judges, the
alerting targets and not the whole namespace around them. Each alert's part is then the targets
its own scope names, filtered the way the engine filters a diagnosis by its scope (where two
labels vary, the batch also covers their other combinations; no alert's part takes those).

Only the tree's target labels may vary within a batch: a target's own answer reads its own
series, whichever other targets are in scope. Any other scope label narrows the series a target's
answer is made of (`model_name` on a pod serving two models; a strict `prometheus.strict_labels`
label on every series), so alerts that differ in one are never coalesced. A target label some
alert of the batch does not hold is left out of its scope (that alert asks about all of its
values), and so is one with more than engine.scope.MAX_CHOICES values (every query would carry a regex of
them all): the batch then reads more targets, and each alert's part still takes only its own. A
fleet-level result (engine/fleet.py) is of the batch's scope, as an alert diagnosed alone has one
of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.findings.model import Diagnosis

# symptom, window start (None: not coalesced), the scope labels its alerts agree on, and the
# alert state itself when coalescing is off (every job its own batch).
BatchKey = tuple[str, datetime | None, tuple[tuple[str, str], ...], tuple[str, str, str] | None]


def window_start(moment: datetime, window: timedelta) -> datetime:
    """`moment` truncated to the window (aligned on the Unix epoch, so restarts agree)."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((moment - epoch) // window) * window


def batch_key(job: AlertJob, window: timedelta, strict_labels: Sequence[str], target_labels: Sequence[str]) -> BatchKey:
    """The batch a firing job joins: one per symptom, window and value of the labels its alerts
    must agree on: the strict labels, and the scope labels that are not the tree's target labels."""
    agreed = tuple(
        sorted((name, value) for name, value in job.scope.items() if name in strict_labels or name not in target_labels)
    )
    if window <= timedelta(0):
        return job.symptom, None, agreed, job.key
    return job.symptom, window_start(job.received_at, window), agreed, None


def part(diagnosis: Diagnosis, scope: Mapping[str, str]) -> Diagnosis:
    """The part of a wider diagnosis that one alert's scope covers.

    A target stays when each scope label it carries has the scope's value; a scope label the
    target does not carry (not one of the tree's target labels) cannot exclude it, as the
    engine's lenient matchers let such series join in. Fleet-level results are scope-wide and stay.
    """
    targets = tuple(
        t for t in diagnosis.targets if all(t.labels.get(name, value) == value for name, value in scope.items())
    )
    return replace(diagnosis, scope=dict(scope), targets=targets)

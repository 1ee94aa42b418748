"""Moments: as users write them (RFC3339 or Unix seconds, the CLI's --at and the API's `at`), and
the wall clock, injected wherever "now" is asked (the engine never reads the time itself)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock: the default Clock of the composition root."""
    return datetime.now(UTC)


def parse_moment(text: str) -> datetime:
    """RFC3339 (a naive one is taken as UTC) or Unix seconds; raises ValueError otherwise."""
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

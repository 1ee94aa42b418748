"""Moments as users write them (RFC3339 or Unix seconds), shared by the CLI's --at and the API's `at`."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_moment(text: str) -> datetime:
    """RFC3339 (a naive one is taken as UTC) or Unix seconds; raises ValueError otherwise."""
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except (ValueError, OverflowError, OSError):
        pass
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

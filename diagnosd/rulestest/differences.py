"""The shipped series tests that answer otherwise on a Prometheus-compatible store, each with why.

Keyed by store, then (tree, case name). Only differences that come from the store's query
semantics belong here, each explained in docs/deploy.md ("Prometheus-compatible stores"); the
runner fails a listed case that starts passing, and any unlisted case that fails.
"""

from __future__ import annotations

from collections.abc import Mapping

from diagnosd.rulestest.stores import Backend

KNOWN: Mapping[Backend, Mapping[tuple[str, str], str]] = {
    Backend.VICTORIAMETRICS: {},
}

"""The stable identity of a finding: symptom + cause + sorted target labels, hashed.

Stable across processes, hosts and releases (never Python's hash()): it keys the store, the
API's /findings/{id} and the alert memory, and it must survive restarts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

LENGTH = 16


def fingerprint(symptom: str, cause: str, labels: Mapping[str, str]) -> str:
    """16 hex digits of SHA-256 over a canonical JSON of the three parts."""
    canonical = json.dumps([symptom, cause, sorted(labels.items())], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:LENGTH]


def labels_key(labels: Mapping[str, str]) -> str:
    """Labels as canonical JSON (sorted keys): how a target is named in the store."""
    return json.dumps(dict(sorted(labels.items())), ensure_ascii=False, separators=(",", ":"))

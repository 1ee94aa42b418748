"""The alert states this replica has seen settled for good (done, rejected, superseded), each with
when the store last wrote it, so that a re-send of one is known a duplicate without a lookup.

Settled is for good: none of those outcomes is ever taken again, by this replica or another (only
a new state or a failed one is: memory.py's claims). The store forgets a state only once it is a
retention old, and an entry here counts only while it is younger than the inbox's refresh (a tenth
of the retention): by then the re-send is looked up again and its memory written, as before.
Bounded: the least recently seen go first.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta

from diagnosd.daemon.alertmanager.memory import FOR_GOOD, AlertRecord, Key

# About 400 bytes an entry (the key's tuple and strings, a datetime, the dict's slot): 4 MB. A
# storm of more distinct states than that looks the rest up, as before.
CAPACITY = 10_000


class Settled:
    def __init__(self, refresh: timedelta, capacity: int = CAPACITY) -> None:
        self._refresh = refresh
        self._capacity = capacity
        self._written: OrderedDict[Key, datetime] = OrderedDict()

    def __len__(self) -> int:
        return len(self._written)

    def due(self, record: AlertRecord | None, now: datetime) -> bool:
        """Whether the store's memory of `record` is a refresh old at `now`: a re-send rewrites it
        (None, not looked up: in flight here, and its mark will write it)."""
        return record is not None and now - record.updated_at >= self._refresh

    def known(self, key: Key, now: datetime) -> bool:
        """Whether `key` is settled and its memory written within the refresh before `now`."""
        written = self._written.get(key)
        if written is None:
            return False
        if now - written >= self._refresh:
            del self._written[key]
            return False
        self._written.move_to_end(key)
        return True

    def note(self, record: AlertRecord | None, written: datetime | None = None) -> None:
        """Remember `record`'s state if it is settled for good, as the store wrote it last: at its
        `updated_at`, or at `written` (the touch that just rewrote it)."""
        if record is None or record.outcome not in FOR_GOOD:
            return
        self._written[record.key] = record.updated_at if written is None else written
        self._written.move_to_end(record.key)
        while len(self._written) > self._capacity:
            self._written.popitem(last=False)

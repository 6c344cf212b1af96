"""Read-only aggregates for the statistics routes and the monitor."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ajet_store import counters
from ajet_store import tables as t
from ajet_store.db import Database


class StatsOps(Database):
    """Counts over episodes, calls, missions and clients."""

    def totals(self) -> dict[str, int]:
        """Episodes by status, plus `calls` and `call_errors` (kept counters: no rows are counted)."""
        with self._read() as c:
            return counters.totals_from(counters.read(c))

    def missions(self) -> list[dict[str, Any]]:
        """Per mission: train episodes by status and the mean reward of the ended ones (kept counters)."""
        with self._read() as c:
            return counters.missions_from(counters.read(c))

    def clients(self) -> list[dict[str, Any]]:
        """Client rows, most recently seen first."""
        with self._read() as c:
            q = sa.select(t.clients).order_by(t.clients.c.last_seen.desc())
            return [dict(m) for m in c.execute(q).mappings()]

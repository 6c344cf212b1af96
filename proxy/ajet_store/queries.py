"""Read-only aggregates for the statistics routes and the monitor."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ajet.types import EpisodeStatus
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database


class StatsOps(Database):
    """Counts over episodes, calls, missions and clients."""

    def totals(self) -> dict[str, int]:
        """Episodes by status, plus `calls` and `call_errors`."""
        with self._read() as c:
            out = {s.value: 0 for s in EpisodeStatus}
            for status, n in c.execute(sa.select(t.episodes.c.status, sa.func.count()).group_by(t.episodes.c.status)):
                out[status] = n
            kept = rows.counters(c)  # kept as calls are written: never a scan of the call log
            out["calls"], out["call_errors"] = kept.get("calls", 0), kept.get("call_errors", 0)
            return out

    def missions(self) -> list[dict[str, Any]]:
        """Per mission: episodes by status and the mean reward of ended train episodes."""
        e = t.episodes.c
        q = (sa.select(e.mission, e.status, sa.func.count(), sa.func.avg(e.reward))
             .where(e.episode_type == "train").group_by(e.mission, e.status))
        out: dict[str, dict[str, Any]] = {}
        with self._read() as c:
            for mission, status, n, avg in c.execute(q):
                m = out.setdefault(mission or "-", {"mission": mission or "-", "open": 0, "ended": 0, "aborted": 0,
                                                   "reward_mean": None})
                if status == EpisodeStatus.ENDED.value:
                    m["ended"], m["reward_mean"] = n, float(avg) if avg is not None else None
                elif status == EpisodeStatus.OPEN.value:
                    m["open"] = n
                else:
                    m["aborted"] += n
        return sorted(out.values(), key=lambda m: m["mission"])

    def clients(self) -> list[dict[str, Any]]:
        """Client rows, most recently seen first."""
        with self._read() as c:
            q = sa.select(t.clients).order_by(t.clients.c.last_seen.desc())
            return [dict(m) for m in c.execute(q).mappings()]

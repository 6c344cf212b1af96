"""The store's statistics: totals kept as the data is written, so no statistic ever counts the episodes or the
call log, and `StatsOps`, the read side the statistics routes and the monitor use.

The `counters` table holds one number per name, changed in the same transaction as the rows it
counts:
- `calls`, `call_errors`: logged calls (`write_calls`);
- `episodes_without_calls`: episodes ended without a single call (they never train);
- `episodes_stale`: ended episodes dropped as older than an asynchronous job's `max_staleness`;
- `episodes_lost_call`: ended episodes with a numbered call never stored (in flight when a proxy died), its
  number closed with a call recorded as never answered (the episode trains);
- `episodes:<status>`: episodes by status (every status change);
- `mission:<status>:<mission>` and `mission:reward_sum:<mission>`: train episodes of each mission by
  status, and the sum of their rewards once ended (the mission table of the monitor).
Reading all of them is one small query, whatever the size of the store (`get_rollout_stat` at 1M
calls). `backfill` computes them from the rows (for a store upgraded to schema 4).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import sqlalchemy as sa

from ajet.types import EpisodeStatus
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database

NO_CALLS = "the episode made no LLM calls"
"""Why an episode ended without a single call never trains (its reward is still recorded)."""
WITHOUT_CALLS = "episodes_without_calls"
"""The counter of such episodes (shown by the statistics and the monitor)."""
STALE = "episodes_stale"
"""The counter of ended episodes an asynchronous batch dropped as too old to train (`max_staleness`)."""
LOST_CALL = "episodes_lost_call"
"""The counter of ended episodes a call numbered for them was never stored (in flight when its proxy died): the
number is closed with a call recorded as never answered, and the episode trains; the trainer reports how many each
step (`lost_call_episodes`)."""
NEVER_ANSWERED = "never answered: numbered, but its proxy stopped before logging it"
"""The error of the call that closes such a gap (no ids: it trains nothing, and its neighbours train as ever)."""
STALE_PREFIX = "stale: "
"""How the `untrainable_reason` of such an episode starts."""
NO_MISSION = "-"
"""How an episode begun without a mission label is counted."""


def episodes_key(status: str) -> str:
    """The counter of episodes in `status`."""
    return f"episodes:{status}"


def mission_key(kind: str, mission: Optional[str]) -> str:
    """The counter `kind` (a status, or `reward_sum`) of train episodes of `mission`."""
    return f"mission:{kind}:{mission or NO_MISSION}"


def bump(c: sa.Connection, deltas: dict[str, float]) -> None:
    """Add each delta to its counter in the caller's transaction, in one statement (a new name starts at 0). An
    upsert, not an update then an insert: two proxies that bump a new name at once on PostgreSQL both count. The
    rows are locked in name order, the one order every transaction takes them in: two in another order deadlocked
    (`bench.proxy_scaling`, 3 workers on PostgreSQL)."""
    changes = [{"name": name, "value": deltas[name]} for name in sorted(deltas) if deltas[name]]
    if changes:
        rows.insert_or_add(c, t.counters, "name", changes, add=("value",))


def status_deltas(
    mission: Optional[str], episode_type: str, old: Optional[str], new: str, n: int = 1, reward: float = 0.0
) -> dict[str, float]:
    """The counter changes of `n` episodes of one mission and type moving from `old` (None: new) to `new`."""
    out: dict[str, float] = {episodes_key(new): n}
    if old is not None:
        out[episodes_key(old)] = -n
    if episode_type == "train":
        out[mission_key(new, mission)] = n
        if old is not None:
            out[mission_key(old, mission)] = -n
        if reward:
            out[mission_key("reward_sum", mission)] = reward
    return out


def merge(parts: Iterable[dict[str, float]]) -> dict[str, float]:
    """Sum several delta maps."""
    out: dict[str, float] = {}
    for part in parts:
        for name, delta in part.items():
            out[name] = out.get(name, 0) + delta
    return out


def bulk_move(c: sa.Connection, where: Any, new: str) -> None:
    """Count the move of every episode matching `where` to `new` (call before the UPDATE that moves them)."""
    e = t.episodes.c
    q = (
        sa.select(e.mission, e.episode_type, e.status, sa.func.count())
        .where(where)
        .group_by(e.mission, e.episode_type, e.status)
    )
    bump(c, merge(status_deltas(m, kind, old, new, n) for m, kind, old, n in c.execute(q)))


def value(c: sa.Connection, name: str) -> float:
    """One counter (0 before its first change)."""
    got = c.execute(sa.select(t.counters.c.value).where(t.counters.c.name == name)).scalar()
    return float(got or 0)


def read(c: sa.Connection) -> dict[str, float]:
    """Every counter."""
    return {name: float(value) for name, value in c.execute(sa.select(t.counters.c.name, t.counters.c.value))}


def totals_from(kept: dict[str, float]) -> dict[str, int]:
    """Episodes by status, plus `calls` and `call_errors`."""
    out = {s.value: int(kept.get(episodes_key(s.value), 0)) for s in EpisodeStatus}
    out["calls"], out["call_errors"] = int(kept.get("calls", 0)), int(kept.get("call_errors", 0))
    out["without_calls"] = int(kept.get(WITHOUT_CALLS, 0))
    out["stale"] = int(kept.get(STALE, 0))
    out["lost_call"] = int(kept.get(LOST_CALL, 0))
    return out


def missions_from(kept: dict[str, float]) -> list[dict[str, Any]]:
    """Per mission: open, ended, aborted (expired included) train episodes and the ended ones' mean reward."""
    by: dict[str, dict[str, float]] = {}
    for name, value in kept.items():
        if name.startswith("mission:"):
            _, kind, mission = name.split(":", 2)
            by.setdefault(mission, {})[kind] = value
    out = []
    for mission, k in sorted(by.items()):
        ended = int(k.get(EpisodeStatus.ENDED.value, 0))
        aborted = int(k.get(EpisodeStatus.ABORTED.value, 0) + k.get(EpisodeStatus.EXPIRED.value, 0))
        row = {
            "mission": mission,
            "open": int(k.get(EpisodeStatus.OPEN.value, 0)),
            "ended": ended,
            "aborted": aborted,
            "reward_mean": k.get("reward_sum", 0.0) / ended if ended else None,
        }
        if row["open"] or ended or aborted:
            out.append(row)
    return out


def backfill(c: sa.Connection) -> None:
    """Compute every counter from the rows (replacing what was kept)."""
    e, lc = t.episodes.c, t.llm_calls.c
    c.execute(t.counters.delete())
    deltas: list[dict[str, float]] = [
        {
            "calls": c.execute(sa.select(sa.func.count()).select_from(t.llm_calls)).scalar() or 0,
            "call_errors": c.execute(sa.select(sa.func.count()).where(lc.error.is_not(None))).scalar() or 0,
            WITHOUT_CALLS: c.execute(sa.select(sa.func.count()).where(e.untrainable_reason == NO_CALLS)).scalar() or 0,
            STALE: c.execute(sa.select(sa.func.count()).where(e.untrainable_reason.startswith(STALE_PREFIX))).scalar()
            or 0,
            LOST_CALL: c.execute(
                sa.select(sa.func.count(sa.distinct(lc.episode_uuid))).where(lc.error == NEVER_ANSWERED)
            ).scalar()
            or 0,
        }
    ]
    q = sa.select(e.mission, e.episode_type, e.status, sa.func.count(), sa.func.sum(e.reward)).group_by(
        e.mission, e.episode_type, e.status
    )
    for mission, kind, status, n, reward_sum in c.execute(q):
        ended = status == EpisodeStatus.ENDED.value
        deltas.append(status_deltas(mission, kind, None, status, n, float(reward_sum or 0) if ended else 0.0))
    bump(c, merge(deltas))


class StatsOps(Database):
    """Counts over episodes, calls, missions and clients."""

    def totals(self) -> dict[str, int]:
        """Episodes by status, plus `calls` and `call_errors` (kept counters: no rows are counted)."""
        with self._read() as c:
            return totals_from(read(c))

    def missions(self) -> list[dict[str, Any]]:
        """Per mission: train episodes by status and the mean reward of the ended ones (kept counters)."""
        with self._read() as c:
            return missions_from(read(c))

    def clients(self) -> list[dict[str, Any]]:
        """Client rows, most recently seen first."""
        with self._read() as c:
            q = sa.select(t.clients).order_by(t.clients.c.last_seen.desc())
            return [dict(m) for m in c.execute(q).mappings()]

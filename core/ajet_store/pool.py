"""The rollout pool: ended, trainable, not yet consumed train episodes of the current run, as the trainer's batch
policies and the proxy's mission admission read it."""

from __future__ import annotations

from typing import Any, Sequence

import sqlalchemy as sa

from ajet.types import EpisodeStatus
from ajet_store import counters
from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.types import PoolEpisode


class PoolOps(Database):
    """Reads of the rollout pool, and taking stale episodes out of it."""

    def pool_mark(self) -> tuple[int, float]:
        """What changes whenever the rollout pool does: how many episodes it holds and when the latest ended (one
        read of the pool index, where `pool_episodes` joins every pool episode's calls). A waiting trainer reads
        the pool again only when this changed."""
        e = t.episodes.c
        q = sa.select(sa.func.count(), sa.func.max(e.ended_at)).where(*self._pool_filter())
        with self._read() as c:
            count, latest = c.execute(q).one()
        return int(count), float(latest or 0.0)

    @staticmethod
    def _pool_filter() -> tuple[Any, ...]:
        """Which episodes are in the rollout pool: ended train episodes of the current run, trainable, not consumed."""
        e = t.episodes.c
        run = sa.select(t.experiments.c.run_id).where(t.experiments.c.id == 1).scalar_subquery()
        return (
            e.status == EpisodeStatus.ENDED.value,
            e.episode_type == "train",
            e.run_id == run,
            e.consumed_step.is_(None),
            e.untrainable.is_(False),
        )

    def pool_episodes(self) -> list[PoolEpisode]:
        """Ended, trainable, not yet consumed train episodes of the current run: the rollout pool."""
        e = t.episodes.c
        oldest = (
            sa.select(sa.func.min(t.llm_calls.c.policy_version))
            .where(t.llm_calls.c.episode_uuid == e.uuid)
            .scalar_subquery()
        )
        q = (
            sa.select(
                e.uuid,
                e.task_id,
                e.reward,
                e.ended_at,
                e.mission,
                sa.func.coalesce(oldest, e.policy_version_start).label("oldest"),
            )
            .where(*self._pool_filter())
            .order_by(e.ended_at)
        )
        with self._read() as c:
            return [
                PoolEpisode(r.uuid, r.task_id, r.reward, r.ended_at, r.mission, int(r.oldest)) for r in c.execute(q)
            ]

    @retried
    def drop_stale(self, uuids: Sequence[str], reason: str) -> int:
        """Take pool episodes too old to train out of the pool for good (kept, flagged untrainable with
        "stale: <reason>", counted as `episodes_stale`); returns how many were dropped."""
        if not uuids:
            return 0
        e = t.episodes.c
        with self._tx() as c:
            res = c.execute(
                t.episodes.update()
                .where(e.uuid.in_(list(uuids)), e.consumed_step.is_(None), e.untrainable.is_(False))
                .values(untrainable=True, untrainable_reason=(counters.STALE_PREFIX + reason)[:256])
            )
            counters.bump(c, {counters.STALE: res.rowcount})
            return int(res.rowcount)

    def mission_in_flight(self, mission: str) -> int:
        """Train episodes of `mission` in the current run that a coming batch may still take: open ones, and
        ended ones waiting in the pool (what a mission mix admits new episodes against)."""
        e = t.episodes.c
        run = sa.select(t.experiments.c.run_id).where(t.experiments.c.id == 1).scalar_subquery()
        waiting = sa.and_(e.status == EpisodeStatus.ENDED.value, e.consumed_step.is_(None), e.untrainable.is_(False))
        q = (
            sa.select(sa.func.count())
            .select_from(t.episodes)
            .where(
                e.mission == mission,
                e.episode_type == "train",
                e.run_id == run,
                sa.or_(e.status == EpisodeStatus.OPEN.value, waiting),
            )
        )
        with self._read() as c:
            return int(c.execute(q).scalar_one())

"""Training steps: what the trainer writes after each update (episodes consumed exactly once), and prunes."""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

import sqlalchemy as sa

from ajet.stat_types import StepInfo
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.errors import AlreadyConsumed

PRUNED = ""
"""The request body of a call whose bodies were pruned (its response becomes NULL)."""


class StepOps(Database):
    """The step log (exactly-once consumption of episodes)."""

    # ------------------------------------------------------------------ steps
    @retried
    def record_step(
        self,
        step: int,
        policy_version: int,
        episode_uuids: Sequence[str],
        reward_mean: Optional[float],
        metrics: dict[str, Any],
    ) -> None:
        """Record a training step and mark its episodes consumed, atomically.

        A step recorded in WEIGHT_SYNCING (a synchronous update, its weights already served) also resumes
        ROLLING in the same transaction: a client that sees the step can begin its next episodes at once,
        instead of meeting a 503 while the trainer writes its metrics. Raises `AlreadyConsumed` (and records
        nothing) if any episode was already consumed or is not ended.
        """
        e = t.episodes.c
        uuids = set(episode_uuids)
        with self._tx() as c:
            if uuids:
                res = c.execute(
                    t.episodes.update()
                    .where(
                        e.uuid.in_(uuids),
                        e.consumed_step.is_(None),
                        e.status == EpisodeStatus.ENDED.value,
                    )
                    .values(consumed_step=step)
                )
                if res.rowcount != len(uuids):
                    raise AlreadyConsumed(
                        f"step {step}: {len(uuids) - res.rowcount} episode(s) were already consumed or not ended"
                    )
            c.execute(
                t.steps.insert().values(
                    step=step,
                    policy_version=policy_version,
                    num_episodes=len(episode_uuids),
                    reward_mean=reward_mean,
                    metrics=metrics,
                    finished_at=time.time(),
                )
            )
            resume: dict[str, Any] = {}
            if rows.locked_experiment(c).state == ExperimentState.WEIGHT_SYNCING:
                resume = {"state": ExperimentState.ROLLING.value, "state_since": time.time()}
            c.execute(
                t.experiments.update().values(
                    global_step=step, policy_version=policy_version, update_failures=0, **resume
                )
            )

    @retried
    def prune_bodies(self, keep_steps: int) -> int:
        """Drop the request and response bodies of calls of episodes consumed more than `keep_steps` steps
        ago (token ids, logprobs, rewards, metrics and every id stay). Returns the number of calls pruned."""
        e, lc = t.episodes.c, t.llm_calls.c
        with self._tx() as c:
            cutoff = rows.experiment(c).global_step - keep_steps
            old = sa.select(e.uuid).where(e.consumed_step.is_not(None), e.consumed_step <= cutoff)
            res = c.execute(
                t.llm_calls.update()
                .where(lc.episode_uuid.in_(old), lc.request != PRUNED)
                .values(request=PRUNED, response=None)
            )
            return int(res.rowcount or 0)

    def vacuum(self) -> None:
        """Give the space of pruned bodies back to the file system (SQLite `VACUUM`; PostgreSQL `VACUUM`)."""
        raw = self._writes.raw_connection()  # VACUUM runs outside any transaction, so not through `_tx`
        driver = raw.driver_connection if self._writes.dialect.name == "postgresql" else None
        try:
            if driver is not None:
                driver.autocommit = True  # psycopg: no implicit transaction around VACUUM
            cur = raw.cursor()
            cur.execute("VACUUM")
            cur.close()
        finally:
            if driver is not None:
                driver.autocommit = False
            raw.close()

    @retried
    def rollback_to_step(self, step: int, policy_version: int) -> list[str]:
        """Forget the steps after `step` (their weights were lost with a crashed trainer).

        The episodes those steps consumed return to the pool, so each rewarded episode is trained
        exactly once in the lineage of weights that survives. Returns the uuids released.
        """
        e = t.episodes.c
        with self._tx() as c:
            released = [r[0] for r in c.execute(sa.select(e.uuid).where(e.consumed_step > step))]
            if released:
                c.execute(t.episodes.update().where(e.consumed_step > step).values(consumed_step=None))
            c.execute(t.steps.delete().where(t.steps.c.step > step))
            c.execute(t.experiments.update().values(global_step=step, policy_version=policy_version))
            return released

    def steps(self, last: Optional[int] = None) -> list[StepInfo]:
        """Recorded steps, oldest first (the `last` newest when given)."""
        q = sa.select(t.steps).order_by(t.steps.c.step.desc())
        if last is not None:
            q = q.limit(last)
        with self._read() as c:
            found = [rows.step_from(m) for m in c.execute(q).mappings()]
        return found[::-1]

    def steps_after(self, after: int, limit: int) -> list[StepInfo]:
        """At most `limit` steps newer than `after`, oldest first (a page of the history)."""
        q = sa.select(t.steps).where(t.steps.c.step > after).order_by(t.steps.c.step).limit(limit)
        with self._read() as c:
            return [rows.step_from(m) for m in c.execute(q).mappings()]

"""Training steps and deployments: what the trainer writes after each update, and where it serves."""

from __future__ import annotations

import time
from typing import Any, Iterable, Optional, Sequence

import sqlalchemy as sa

from ajet.types import EngineState, EpisodeStatus
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database
from ajet_store.errors import AlreadyConsumed
from ajet_store.types import Deployment, StepRow

PRUNED = ""
"""The request body of a call whose bodies were pruned (its response becomes NULL)."""


class StepOps(Database):
    """The step log (exactly-once consumption of episodes) and the deployments table."""

    # ------------------------------------------------------------------ steps
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
            if rows.locked_engine(c).state == EngineState.WEIGHT_SYNCING:
                resume = {"state": EngineState.ROLLING.value, "state_since": time.time()}
            c.execute(
                t.engine_state.update().values(
                    global_step=step, policy_version=policy_version, update_failures=0, **resume
                )
            )

    def prune_bodies(self, keep_steps: int) -> int:
        """Drop the request and response bodies of calls of episodes consumed more than `keep_steps` steps
        ago (token ids, logprobs, rewards, metrics and every id stay). Returns the number of calls pruned."""
        e, lc = t.episodes.c, t.llm_calls.c
        with self._tx() as c:
            cutoff = rows.engine(c).global_step - keep_steps
            old = sa.select(e.uuid).where(e.consumed_step.is_not(None), e.consumed_step <= cutoff)
            res = c.execute(
                t.llm_calls.update()
                .where(lc.episode_uuid.in_(old), lc.request != PRUNED)
                .values(request=PRUNED, response=None)
            )
            return int(res.rowcount or 0)

    def vacuum(self) -> None:
        """Give the space of pruned bodies back to the file system (SQLite `VACUUM`; PostgreSQL `VACUUM`)."""
        raw = self._w.raw_connection()  # VACUUM runs outside any transaction, so not through `_tx`
        driver = raw.driver_connection if self._w.dialect.name == "postgresql" else None
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
            c.execute(t.engine_state.update().values(global_step=step, policy_version=policy_version))
            return released

    def steps(self, last: Optional[int] = None) -> list[StepRow]:
        """Recorded steps, oldest first (the `last` newest when given)."""
        q = sa.select(t.steps).order_by(t.steps.c.step.desc())
        if last is not None:
            q = q.limit(last)
        with self._read() as c:
            found = [rows.step_from(m) for m in c.execute(q).mappings()]
        return found[::-1]

    def steps_after(self, after: int, limit: int) -> list[StepRow]:
        """At most `limit` steps newer than `after`, oldest first (a page of the history)."""
        q = sa.select(t.steps).where(t.steps.c.step > after).order_by(t.steps.c.step).limit(limit)
        with self._read() as c:
            return [rows.step_from(m) for m in c.execute(q).mappings()]

    # ------------------------------------------------------------------ deployments
    def register_deployment(self, dep: Deployment) -> None:
        """Add or replace a deployment; the proxy reloads its router."""
        self.register_deployments([dep])

    def register_deployments(self, deps: Sequence[Deployment]) -> None:
        """Add or replace deployments in one transaction (the proxy sees all of them change at once)."""
        now = time.time()
        with self._tx() as c:
            for dep in deps:
                c.execute(t.deployments.delete().where(t.deployments.c.name == dep.name))
                c.execute(
                    t.deployments.insert().values(
                        name=dep.name,
                        base_url=dep.base_url,
                        model=dep.model,
                        policy_version=dep.policy_version,
                        updated_at=now,
                        api_key=dep.api_key,
                    )
                )
            _bump_deployments(c)

    def remove_deployments(self, names: Optional[Iterable[str]] = None) -> None:
        """Remove the named deployments (all when None)."""
        with self._tx() as c:
            stmt = t.deployments.delete()
            if names is not None:
                stmt = stmt.where(t.deployments.c.name.in_(list(names)))
            c.execute(stmt)
            _bump_deployments(c)

    def deployments(self) -> list[Deployment]:
        """Registered deployments, by name."""
        with self._read() as c:
            found = c.execute(sa.select(t.deployments).order_by(t.deployments.c.name)).mappings()
            return [Deployment(r["name"], r["base_url"], r["model"], r["policy_version"], r["api_key"]) for r in found]


def _bump_deployments(c: sa.Connection) -> None:
    col = t.engine_state.c.deployments_version
    c.execute(t.engine_state.update().values(deployments_version=col + 1))

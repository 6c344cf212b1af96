"""Evaluations and the served judge's calls.

Evaluations: one row per evaluation of a held-out task set (`ajet.evaluation`), with the figures the proxy computed
from its eval episodes (`ajet.evaluation_types.summarise`) and the policy versions that served them. The judge's
calls (`/judge/v1`) are kept apart from the episodes' calls: they are never trained."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import sqlalchemy as sa

from ajet.evaluation_types import EvaluationInfo, Summary
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database, retried


@dataclass(frozen=True)
class EvalEpisode:
    """An episode as an evaluation checks and counts it."""

    uuid: str
    task_id: Optional[str]
    episode_type: str
    status: str
    reward: Optional[float]
    is_success: Optional[bool]
    versions: tuple[int, int]
    """The oldest and newest policy version that answered its calls (the version it began at, without calls)."""


class EvaluationOps(Database):
    """The experiment's evaluations."""

    @retried
    def evaluation_episodes(self, uuids: Sequence[str]) -> list[EvalEpisode]:
        """The episodes of `uuids` this store holds (those it does not are left out)."""
        e, c = t.episodes.c, t.llm_calls.c
        versions = (
            sa.select(c.episode_uuid, sa.func.min(c.policy_version), sa.func.max(c.policy_version))
            .where(c.episode_uuid.in_(list(uuids)))
            .group_by(c.episode_uuid)
        )
        query = sa.select(e.uuid, e.task_id, e.episode_type, e.status, e.reward, e.is_success,
                          e.policy_version_start).where(e.uuid.in_(list(uuids)))  # fmt: skip
        with self._read() as conn:
            served = {u: (lo, hi) for u, lo, hi in conn.execute(versions)}
            found = conn.execute(query).all()
        return [
            EvalEpisode(
                r.uuid,
                r.task_id,
                r.episode_type,
                r.status,
                r.reward,
                r.is_success,
                served.get(r.uuid, (r.policy_version_start, r.policy_version_start)),
            )  # fmt: skip
            for r in found
        ]

    @retried
    def record_evaluation(
        self, name: str, k: int, summary: Summary, versions: tuple[int, int], uuids: Sequence[str]
    ) -> EvaluationInfo:
        """Store one evaluation, at the experiment's step now; returns it as stored."""
        now = time.time()
        with self._tx() as conn:
            info = EvaluationInfo(id=0, name=name, k=k, tasks=summary.tasks, episodes=summary.episodes,
                                  mean_reward=summary.mean_reward, pass_at_k=summary.pass_at_k,
                                  version_min=versions[0], version_max=versions[1],
                                  global_step=rows.locked_experiment(conn).global_step, created_at=now)  # fmt: skip
            values = info.model_dump(exclude={"id"})
            key = conn.execute(t.evaluations.insert().values(**values, episode_uuids=list(uuids))).inserted_primary_key
        assert key is not None  # an insert into a table with a primary key
        return info.model_copy(update={"id": int(key[0])})

    def last_evaluation(self) -> Optional[EvaluationInfo]:
        """The newest evaluation, if any."""
        found = self.evaluations(last=True)
        return found[0] if found else None

    @retried
    def evaluations(self, name: Optional[str] = None, last: bool = False) -> list[EvaluationInfo]:
        """The experiment's evaluations (of task set `name` alone, when given), oldest first (`last`: the newest
        alone)."""
        v = t.evaluations.c
        query = sa.select(*(col for col in t.evaluations.c if col.name != "episode_uuids"))
        query = query.order_by(v.id.desc()).limit(1) if last else query.order_by(v.id)
        if name is not None:
            query = query.where(v.name == name)
        with self._read() as conn:
            return [EvaluationInfo(**row._mapping) for row in conn.execute(query)]

    @retried
    def log_judge_call(self, request: str, response: Optional[str], status: int, latency_ms: float) -> None:
        """Keep one call to the served judge (apart from the episodes' calls: it is never trained)."""
        with self._tx() as conn:
            conn.execute(t.judge_calls.insert().values(request=request, response=response, status=status,
                                                       latency_ms=latency_ms, created_at=time.time()))  # fmt: skip

    @retried
    def judge_calls(self) -> list[tuple[str, Optional[str], int]]:
        """The served judge's calls, oldest first: (request, response, status)."""
        j = t.judge_calls.c
        with self._read() as conn:
            return [
                (r.request, r.response, r.status)
                for r in conn.execute(sa.select(j.request, j.response, j.status).order_by(j.id))
            ]

"""What the explorer reads (read-only): pages of episodes by filter, a step's GRPO group, steps in a range, and
which episodes a reward version scored otherwise than their clients.

Every query is paged and rides an index: a step's episodes `ix_episodes_pool` (its first column is
`consumed_step`), a task's `task_id`'s, the newest-first list `ix_episodes_created`, an episode's calls
`llm_calls.episode_uuid`'s, steps their primary key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import sqlalchemy as sa

from ajet.stat_types import StepInfo
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.db import Database
from ajet_store.types import EpisodeRow

SORTS = {"newest": ("created_at", True), "oldest": ("created_at", False), "reward": ("reward", True),
         "reward_asc": ("reward", False), "calls": ("num_calls", True)}  # fmt: skip
"""The orders the episode list offers: (column, descending)."""


@dataclass(frozen=True)
class EpisodeFilter:
    """Which episodes a list shows (None: any)."""

    step: Optional[int] = None
    """Consumed by this training step."""
    task_id: Optional[str] = None
    """Of this task (a GRPO group, within a step)."""
    status: Optional[str] = None
    """`open`, `ended`, `aborted` or `expired`."""
    client_id: Optional[str] = None
    """Begun by this client."""
    mission: Optional[str] = None
    """Of this mission (the client's label)."""
    reward_min: Optional[float] = None
    """Reward at least this."""
    reward_max: Optional[float] = None
    """Reward at most this."""
    differs_in: Optional[int] = None
    """Whose reward under this reward version differs from their client's (or the version's function raised)."""
    sort: str = "newest"
    """One of `SORTS`."""


class ExploreOps(Database):
    """Read-only queries of the explorer's pages."""

    def episode_page(self, f: EpisodeFilter, limit: int, offset: int = 0) -> list[EpisodeRow]:
        """At most `limit` episodes matching `f` in its order, after skipping `offset`."""
        e = t.episodes.c
        column, desc = SORTS.get(f.sort, SORTS["newest"])
        order = [getattr(e, column).desc() if desc else getattr(e, column).asc(), e.uuid.desc() if desc else e.uuid]
        q = sa.select(t.episodes).where(*_conditions(f)).order_by(*order).limit(limit).offset(offset)
        with self._read() as c:
            return [rows.episode_from(m) for m in c.execute(q).mappings()]

    def group(self, step: int, task_id: str) -> list[EpisodeRow]:
        """The episodes of one GRPO group: a task's episodes consumed by one step, best reward first."""
        e = t.episodes.c
        q = (
            sa.select(t.episodes)
            .where(e.consumed_step == step, e.task_id == task_id)
            .order_by(e.reward.desc(), e.uuid)
            .limit(1000)
        )
        with self._read() as c:
            return [rows.episode_from(m) for m in c.execute(q).mappings()]

    def differing(self, version: int) -> int:
        """How many episodes' rewards under `version` differ from their client's."""
        with self._read() as c:
            n = c.execute(sa.select(sa.func.count()).select_from(t.episodes).where(differs_in(version))).scalar()
        return int(n or 0)

    def step_row(self, step: int) -> Optional[StepInfo]:
        """One recorded step (None: not recorded)."""
        with self._read() as c:
            m = c.execute(sa.select(t.steps).where(t.steps.c.step == step)).mappings().first()
        return rows.step_from(m) if m is not None else None

    def step_tasks(self, step: int) -> list[tuple[str, int, Optional[float]]]:
        """A step's GRPO groups: (task, episodes, mean reward), by task."""
        e = t.episodes.c
        q = (
            sa.select(e.task_id, sa.func.count(), sa.func.avg(e.reward))
            .where(e.consumed_step == step)
            .group_by(e.task_id)
            .order_by(e.task_id)
        )
        with self._read() as c:
            return [(str(task), int(n), None if mean is None else float(mean)) for task, n, mean in c.execute(q)]


def _conditions(f: EpisodeFilter) -> list[sa.ColumnElement[bool]]:
    e = t.episodes.c
    given = [
        (f.step, lambda v: e.consumed_step == v),
        (f.task_id, lambda v: e.task_id == v),
        (f.status, lambda v: e.status == v),
        (f.client_id, lambda v: e.client_id == v),
        (f.mission, lambda v: e.mission == v),
        (f.reward_min, lambda v: e.reward >= v),
        (f.reward_max, lambda v: e.reward <= v),
    ]
    found = [make(value) for value, make in given if value is not None]
    return found if f.differs_in is None else [*found, differs_in(f.differs_in)]


def differs_in(version: int) -> sa.ColumnElement[bool]:
    """An episode's reward under `version` is not its client's: another value, or none (the function raised)."""
    e, r = t.episodes.c, t.episode_rewards.c
    other = sa.or_(r.reward.is_(None), e.reward.is_(None), r.reward != e.reward)
    return sa.exists(sa.select(r.episode_uuid).where(r.version == version, r.episode_uuid == e.uuid, other))

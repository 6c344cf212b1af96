"""Batch policies: pure functions over the rollout pool (ended, unconsumed train episodes).

Each policy answers "how far is the pool from one training step" and, when ready, which episodes
the step takes. Counting is by `task_id`:
- enough episodes: at least batch_size x num_repeat episodes;
- enough tasks (default): batch_size task ids, each with at least num_repeat episodes;
- enough non-dummy tasks: as above, but a task whose rewards are all equal (no GRPO signal) does not count.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from ajet.stat_types import BatchProgress
from ajet.types import BatchMode
from ajet_store.types import PoolEpisode


def group_by_task(pool: Sequence[PoolEpisode]) -> "OrderedDict[str, list[PoolEpisode]]":
    """Episodes by task id, tasks in order of their first ended episode."""
    groups: OrderedDict[str, list[PoolEpisode]] = OrderedDict()
    for ep in sorted(pool, key=lambda e: e.ended_at):
        groups.setdefault(ep.task_id, []).append(ep)
    return groups


def is_dummy(group: Sequence[PoolEpisode]) -> bool:
    """A group whose rewards are all equal carries no GRPO signal."""
    return len({ep.reward for ep in group}) <= 1


def rollout_until_finish_enough_episodes(pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int
                                         ) -> BatchProgress:
    """Progress in episodes: target batch_size x num_repeat."""
    target = batch_size * num_repeat
    return BatchProgress(mode=BatchMode.EPISODES, current=len(pool), target=target, ready=len(pool) >= target)


def _full_tasks(pool: Sequence[PoolEpisode], num_repeat: int, skip_dummy: bool) -> list[str]:
    out = []
    for task_id, group in group_by_task(pool).items():
        if len(group) >= num_repeat and not (skip_dummy and is_dummy(group[:num_repeat])):
            out.append(task_id)
    return out


def rollout_until_finish_enough_tasks(pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int
                                      ) -> BatchProgress:
    """Progress in tasks that have num_repeat episodes: target batch_size."""
    n = len(_full_tasks(pool, num_repeat, skip_dummy=False))
    return BatchProgress(mode=BatchMode.TASKS, current=n, target=batch_size, ready=n >= batch_size)


def rollout_until_finish_enough_non_dummy_tasks(pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int
                                                ) -> BatchProgress:
    """Progress in full tasks whose rewards differ: target batch_size."""
    n = len(_full_tasks(pool, num_repeat, skip_dummy=True))
    return BatchProgress(mode=BatchMode.NON_DUMMY_TASKS, current=n, target=batch_size, ready=n >= batch_size)


POLICIES = {
    BatchMode.EPISODES: rollout_until_finish_enough_episodes,
    BatchMode.TASKS: rollout_until_finish_enough_tasks,
    BatchMode.NON_DUMMY_TASKS: rollout_until_finish_enough_non_dummy_tasks,
}


def all_progress(pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int) -> list[BatchProgress]:
    """Progress under all three modes, in a fixed order."""
    return [fn(pool, batch_size, num_repeat) for fn in POLICIES.values()]


def select_batch(pool: Sequence[PoolEpisode], mode: BatchMode, batch_size: int, num_repeat: int
                 ) -> list[PoolEpisode]:
    """The episodes one training step takes under `mode` ([] if the pool is not ready).

    Task modes take the first batch_size qualifying tasks, num_repeat episodes each (first ended
    first); the episodes mode takes the oldest batch_size x num_repeat episodes. Episodes not taken
    stay in the pool for the next step.
    """
    if not POLICIES[mode](pool, batch_size, num_repeat).ready:
        return []
    if mode == BatchMode.EPISODES:
        return sorted(pool, key=lambda e: e.ended_at)[: batch_size * num_repeat]
    groups = group_by_task(pool)
    chosen = _full_tasks(pool, num_repeat, skip_dummy=mode == BatchMode.NON_DUMMY_TASKS)[:batch_size]
    return [ep for task_id in chosen for ep in groups[task_id][:num_repeat]]

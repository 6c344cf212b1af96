"""Batch policies: pure functions over the rollout pool (ended, unconsumed train episodes).

Each policy answers "how far is the pool from one training step" and, when ready, which episodes
the step takes. Counting is by `task_id`:
- enough episodes: at least batch_size x num_repeat episodes;
- enough tasks (default): batch_size task ids, each with at least num_repeat episodes;
- enough non-dummy tasks: as above, but a task whose rewards are all equal (no GRPO signal) does not count.

`split_stale` sorts out episodes too old for an asynchronous step (`max_staleness`) before a policy runs.

A mission mix (`caps`: mission -> the most share of a batch its tasks may take, the job's `mission_mix`)
bounds each capped mission to `mission_limit` tasks (episodes, in the episodes mode) of a batch; what is
over its share waits in the pool for a later step. Missions not named are not capped.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Sequence, TypeVar

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


T = TypeVar("T")
Caps = Mapping[str, float]
"""Mission -> the most share of a batch (0 < share <= 1) its tasks may take."""

NO_CAPS: Caps = MappingProxyType({})
"""No mission capped (a read-only mapping, safe as a default)."""


def split_stale(
    pool: Sequence[PoolEpisode], version: int, max_staleness: int
) -> tuple[list[PoolEpisode], list[PoolEpisode]]:
    """(fresh, stale): an episode is stale when its oldest call is more than `max_staleness` versions behind
    `version`, the policy the next update starts from (asynchronous training trains only fresh ones)."""
    fresh = [p for p in pool if version - p.oldest_version <= max_staleness]
    stale = [p for p in pool if version - p.oldest_version > max_staleness]
    return fresh, stale


def mission_limit(share: float, units: int) -> int:
    """How many of a batch's `units` (tasks, or episodes) a mission capped at `share` may take: at least one."""
    return max(1, math.floor(share * units + 1e-9))


def _capped(items: Sequence[T], mission_of: Callable[[T], Optional[str]], caps: Caps, units: int) -> list[T]:
    """`items` in order, skipping those whose mission already has its share of `units`."""
    if not caps:
        return list(items)
    taken: dict[str, int] = {}
    out = []
    for item in items:
        mission = mission_of(item)
        if mission is not None and mission in caps:
            if taken.get(mission, 0) >= mission_limit(caps[mission], units):
                continue
            taken[mission] = taken.get(mission, 0) + 1
        out.append(item)
    return out


def _episodes(pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int, caps: Caps) -> list[PoolEpisode]:
    """The pool, oldest first, within the caps (counted in episodes)."""
    return _capped(sorted(pool, key=lambda e: e.ended_at), lambda e: e.mission, caps, batch_size * num_repeat)


def rollout_until_finish_enough_episodes(
    pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int, caps: Caps = NO_CAPS
) -> BatchProgress:
    """Progress in episodes: target batch_size x num_repeat."""
    target, n = batch_size * num_repeat, len(_episodes(pool, batch_size, num_repeat, caps))
    return BatchProgress(mode=BatchMode.EPISODES, current=n, target=target, ready=n >= target)


def _full_tasks(
    pool: Sequence[PoolEpisode], num_repeat: int, skip_dummy: bool, caps: Caps = NO_CAPS, batch_size: int = 0
) -> list[str]:
    out, mission_of = [], {}
    for task_id, group in group_by_task(pool).items():
        if len(group) >= num_repeat and not (skip_dummy and is_dummy(group[:num_repeat])):
            out.append(task_id)
            mission_of[task_id] = group[0].mission
    return _capped(out, mission_of.get, caps, batch_size)


def rollout_until_finish_enough_tasks(
    pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int, caps: Caps = NO_CAPS
) -> BatchProgress:
    """Progress in tasks that have num_repeat episodes: target batch_size."""
    n = len(_full_tasks(pool, num_repeat, False, caps, batch_size))
    return BatchProgress(mode=BatchMode.TASKS, current=n, target=batch_size, ready=n >= batch_size)


def rollout_until_finish_enough_non_dummy_tasks(
    pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int, caps: Caps = NO_CAPS
) -> BatchProgress:
    """Progress in full tasks whose rewards differ: target batch_size."""
    n = len(_full_tasks(pool, num_repeat, True, caps, batch_size))
    return BatchProgress(mode=BatchMode.NON_DUMMY_TASKS, current=n, target=batch_size, ready=n >= batch_size)


POLICIES = {
    BatchMode.EPISODES: rollout_until_finish_enough_episodes,
    BatchMode.TASKS: rollout_until_finish_enough_tasks,
    BatchMode.NON_DUMMY_TASKS: rollout_until_finish_enough_non_dummy_tasks,
}


def all_progress(
    pool: Sequence[PoolEpisode], batch_size: int, num_repeat: int, caps: Caps = NO_CAPS
) -> list[BatchProgress]:
    """Progress under all three modes, in a fixed order."""
    return [fn(pool, batch_size, num_repeat, caps) for fn in POLICIES.values()]


def select_batch(
    pool: Sequence[PoolEpisode], mode: BatchMode, batch_size: int, num_repeat: int, caps: Caps = NO_CAPS
) -> list[PoolEpisode]:
    """The episodes one training step takes under `mode` ([] if the pool is not ready).

    Task modes take the first batch_size qualifying tasks, num_repeat episodes each (first ended
    first); the episodes mode takes the oldest batch_size x num_repeat episodes; either within the
    missions' caps. Episodes not taken stay in the pool for the next step.
    """
    if not POLICIES[mode](pool, batch_size, num_repeat, caps).ready:
        return []
    if mode == BatchMode.EPISODES:
        return _episodes(pool, batch_size, num_repeat, caps)[: batch_size * num_repeat]
    groups = group_by_task(pool)
    chosen = _full_tasks(pool, num_repeat, mode == BatchMode.NON_DUMMY_TASKS, caps, batch_size)[:batch_size]
    return [ep for task_id in chosen for ep in groups[task_id][:num_repeat]]

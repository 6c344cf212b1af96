"""The three batch policies and batch selection, on hand-made pools."""

from ajet.types import BatchMode
from ajet_store.batch_policy import (
    all_progress,
    rollout_until_finish_enough_episodes,
    rollout_until_finish_enough_non_dummy_tasks,
    rollout_until_finish_enough_tasks,
    select_batch,
)
from ajet_store.types import PoolEpisode


def pool(spec):
    """spec: list of (task_id, reward); ended in list order."""
    return [PoolEpisode(f"e{i}", t, r, float(i)) for i, (t, r) in enumerate(spec)]


P = pool([("a", 1), ("a", 0), ("b", 1), ("b", 1), ("c", 0), ("a", 1), ("d", 0.5)])


def test_enough_episodes():
    p = rollout_until_finish_enough_episodes(P, batch_size=2, num_repeat=3)
    assert (p.current, p.target, p.ready) == (7, 6, True)
    assert not rollout_until_finish_enough_episodes(P, 4, 2).ready


def test_enough_tasks_counts_full_groups():
    p = rollout_until_finish_enough_tasks(P, batch_size=2, num_repeat=2)
    assert (p.current, p.target, p.ready) == (2, 2, True)  # a (3 eps) and b (2 eps)
    assert rollout_until_finish_enough_tasks(P, 2, 3).current == 1  # only a has 3


def test_non_dummy_skips_equal_reward_groups():
    p = rollout_until_finish_enough_non_dummy_tasks(P, batch_size=2, num_repeat=2)
    assert (p.current, p.ready) == (1, False)  # b's rewards are all 1


def test_all_progress_order():
    assert [p.mode for p in all_progress(P, 2, 2)] == [BatchMode.EPISODES, BatchMode.TASKS, BatchMode.NON_DUMMY_TASKS]


def test_select_batch_tasks_takes_num_repeat_each():
    batch = select_batch(P, BatchMode.TASKS, batch_size=2, num_repeat=2)
    assert [e.uuid for e in batch] == ["e0", "e1", "e2", "e3"]  # a's first two, then b's


def test_select_batch_non_dummy_and_episodes():
    assert select_batch(P, BatchMode.NON_DUMMY_TASKS, 2, 2) == []
    assert [e.uuid for e in select_batch(P, BatchMode.NON_DUMMY_TASKS, 1, 2)] == ["e0", "e1"]
    assert [e.uuid for e in select_batch(P, BatchMode.EPISODES, 2, 2)] == ["e0", "e1", "e2", "e3"]


def test_empty_pool():
    assert not any(p.ready for p in all_progress([], 1, 1))
    assert select_batch([], BatchMode.TASKS, 1, 1) == []

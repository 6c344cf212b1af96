"""The three batch policies and batch selection, on hand-made pools."""

from ajet.types import BatchMode
from ajet_store.batch_policy import (
    all_progress,
    rollout_until_finish_enough_episodes,
    rollout_until_finish_enough_non_dummy_tasks,
    rollout_until_finish_enough_tasks,
    select_batch,
    split_stale,
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


def mixed(spec):
    """spec: list of (task_id, mission, reward); ended in list order."""
    return [PoolEpisode(f"m{i}", t, r, float(i), m) for i, (t, m, r) in enumerate(spec)]


MIXED = mixed(
    [
        ("m1", "math", 1),
        ("m1", "math", 0),
        ("m2", "math", 1),
        ("m2", "math", 0),
        ("m3", "math", 1),
        ("m3", "math", 0),
        ("c1", "code", 1),
        ("c1", "code", 0),
        ("c2", "code", 0),
        ("c2", "code", 1),
    ]
)


def test_a_mission_mix_caps_each_missions_share_of_a_batch():
    caps = {"math": 0.5}
    # uncapped, math's three full tasks would fill a batch of 3; capped at half, 1 math task + 2 others
    assert {e.task_id for e in select_batch(MIXED, BatchMode.TASKS, 3, 2)} == {"m1", "m2", "m3"}
    assert {e.task_id for e in select_batch(MIXED, BatchMode.TASKS, 3, 2, caps)} == {"m1", "c1", "c2"}
    assert len(select_batch(MIXED, BatchMode.TASKS, 4, 2, {"math": 0.5, "code": 0.5})) == 8  # 2 + 2 tasks
    assert select_batch(MIXED, BatchMode.TASKS, 4, 2, {"math": 0.25, "code": 0.5}) == []  # 1 + 2 tasks are not 4
    assert rollout_until_finish_enough_tasks(MIXED, 4, 2, {"math": 0.5}).current == 4  # m1, m2 (2 of 4), c1, c2
    assert not rollout_until_finish_enough_tasks(MIXED, 4, 2, {"math": 0.25}).ready  # m1 + c1 + c2 = 3 of 4


def test_a_mission_mix_in_the_episodes_mode_caps_episodes():
    chosen = select_batch(MIXED, BatchMode.EPISODES, 2, 2, {"math": 0.25})  # 1 of 4 episodes may be math
    assert [e.mission for e in chosen] == ["math", "code", "code", "code"]
    assert [e.mission for e in select_batch(MIXED, BatchMode.EPISODES, 4, 2, {"math": 0.5})].count("math") == 4
    capped = rollout_until_finish_enough_episodes(MIXED, 4, 2, {"math": 0.25})
    assert (capped.current, capped.ready) == (2 + 4, False)  # 2 math episodes, 4 code


def test_mission_limits_round_down_but_never_to_zero():
    from ajet_store.batch_policy import mission_limit

    assert [mission_limit(s, 8) for s in (0.4, 0.6, 0.01, 1.0, 0.125)] == [3, 4, 1, 8, 1]


def test_split_stale_keeps_episodes_at_most_k_versions_behind():
    eps = [PoolEpisode(f"e{v}", "a", 1.0, float(v), oldest_version=v) for v in range(6)]
    fresh, stale = split_stale(eps, version=5, max_staleness=2)
    assert [p.oldest_version for p in fresh] == [3, 4, 5]
    assert [p.oldest_version for p in stale] == [0, 1, 2]
    assert split_stale(eps, version=5, max_staleness=5) == (eps, [])

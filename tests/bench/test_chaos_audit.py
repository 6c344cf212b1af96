"""The chaos soak's audit and schedule, pure: a lost call, a lost or changed end, an episode two steps took, one
marked trained by a step never recorded, each is caught; pending and untrainable episodes are counted apart."""

from bench.chaos import schedule
from bench.chaos_audit import StoredEpisode, audit_experiment, starvation
from bench.chaos_cluster import FAULTS


def ep(status="ended", reward=1.0, step=1, why=None, calls=1) -> StoredEpisode:
    return StoredEpisode(status, reward, step, why, calls)


def test_a_clean_store_passes_and_pending_and_untrainable_are_counted_apart():
    stored = {"a": ep(), "b": ep(step=None), "c": ep(step=None, why="no_calls: none"), "d": ep(reward=0.0, step=1)}
    a = audit_experiment({"a": 1, "b": 1, "d": 1}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}, stored, {1: 2})
    assert a.clean and (a.trained, a.pending, dict(a.untrainable)) == (2, 1, {"no_calls": 1})


def test_each_loss_is_caught():
    stored = {"a": ep(calls=0), "b": ep(reward=0.5), "c": ep(status="open", step=None)}
    a = audit_experiment({"a": 1, "x": 2}, {"b": 1.0, "c": 1.0, "y": 0.0}, stored, {1: 2})
    assert (a.lost_calls, a.lost_ends) == (3, 3) and not a.clean  # a's call, x's two; b's reward, c open, y absent


def test_an_episode_two_steps_took_and_an_orphan_step_are_caught():
    stored = {"a": ep(step=1), "b": ep(step=2)}
    assert audit_experiment({}, {}, stored, {1: 1, 2: 2}).trained_twice == 1  # step 2 counts one it never marked
    assert audit_experiment({}, {}, stored, {1: 1}).orphan_steps == 1


def test_the_flood_latency_is_the_others_inside_its_window():
    calls = [("eb", float(t), 0.5 if 10 <= t < 20 else 0.1) for t in range(40)] + [("ea", 15.0, 9.0)] * 30
    s = starvation(calls, "ea", [(10.0, 20.0)])
    assert s["calls_during_flood"] == 10 and s["p99_during_flood_s"] is None  # too few to say
    s = starvation(calls * 3, "ea", [(10.0, 20.0)])
    assert round(s["p99_during_flood_s"], 3) == 0.5 and round(s["p99_otherwise_s"], 3) == 0.1


def test_the_schedule_throws_every_fault_in_a_seeded_order():
    plan = schedule(3, 20 * 60, 60, FAULTS)
    assert set(f for _, f in plan) == set(FAULTS) and len(plan) == 19 and plan[-1][0] < 20 * 60
    assert plan == schedule(3, 20 * 60, 60, FAULTS) and plan != schedule(4, 20 * 60, 60, FAULTS)
    assert len(schedule(0, 60, 60, FAULTS)) == len(FAULTS)  # a short soak still throws each once

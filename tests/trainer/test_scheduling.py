"""`ajet_trainer.scheduling`: fair by device time, first come on ties, nobody starved."""

import random

from ajet_trainer.scheduling import Candidate, after_update, next_to_train, on_ready


def test_least_clock_first_then_the_longest_waiting_batch():
    a, b, c = Candidate("a", 5.0, 3.0), Candidate("b", 2.0, 9.0), Candidate("c", 2.0, 4.0)
    assert next_to_train([a, b, c]).experiment == "c"  # b and c tie on clock: c's batch waited longer
    assert next_to_train([a, Candidate("b", 2.0)]).experiment == "a"  # b not ready
    assert next_to_train([Candidate("a", 0.0)]) is None
    moved = after_update(c, 1.5)
    assert moved.clock_s == 3.5 and moved.ready_since is None


def test_a_returning_experiment_gets_no_burst_for_the_time_it_was_away():
    back = on_ready(Candidate("c", 0.0), virtual_s=38.0, now=3.0)
    assert back.clock_s == 38.0 and back.ready_since == 3.0
    assert on_ready(Candidate("d", 50.0), virtual_s=38.0, now=4.0).clock_s == 50.0  # ahead stays ahead


def test_under_random_costs_and_arrivals_a_waiting_experiment_yields_each_other_at_most_one_long_update():
    """While a batch waits, each other experiment gets at most one of its own updates plus the longest update's
    device time (costs differ 50-fold here, arrivals are random): nobody is starved, in device time."""
    rng = random.Random(0)
    names = ["a", "b", "c", "d"]
    cost = {"a": 0.1, "b": 1.0, "c": 5.0, "d": 0.5}
    longest = {n: 1.5 * cost[n] for n in names}  # each update takes its experiment's cost times 0.5 to 1.5
    exps = {n: Candidate(n, 0.0) for n in names}
    waiting: dict[str, dict[str, float]] = {}  # for each waiting batch: device seconds each other got meanwhile
    given = dict.fromkeys(names, 0.0)
    worst = virtual = 0.0
    for step in range(20000):
        for n in names:  # batches arrive at random; each experiment is ready about half of the time
            if exps[n].ready_since is None and rng.random() < 0.5:
                exps[n] = on_ready(exps[n], virtual, float(step))
                waiting[n] = dict.fromkeys(names, 0.0)
        pick = next_to_train(list(exps.values()))
        if pick is None:
            continue
        assert pick.clock_s >= virtual  # the virtual time never goes back
        virtual = pick.clock_s
        n, took = pick.experiment, cost[pick.experiment] * rng.uniform(0.5, 1.5)
        exps[n] = after_update(pick, took)
        given[n] += took
        waiting.pop(n, None)
        for m, got in waiting.items():
            got[n] += took
            bound = longest[n] + max(longest.values())
            assert got[n] <= bound, (m, n, got[n], bound)
            worst = max(worst, got[n] / bound)
    assert worst > 0.5  # the bound is near what happens, not far above it


def test_experiments_always_ready_share_the_device_evenly_whatever_their_updates_cost():
    cost = {"a": 0.1, "b": 1.0, "c": 5.0}
    exps, given, virtual = [Candidate(n, 0.0, 0.0) for n in cost], dict.fromkeys(cost, 0.0), 0.0
    for step in range(3000):
        pick = next_to_train(exps)
        virtual = pick.clock_s
        done = after_update(pick, cost[pick.experiment])
        given[pick.experiment] += cost[pick.experiment]
        exps = [on_ready(done, virtual, float(step)) if c.experiment == pick.experiment else c for c in exps]
    shares = [g / sum(given.values()) for g in given.values()]
    assert max(shares) - min(shares) < 0.01, given  # a third each, though one update costs 50 of another's

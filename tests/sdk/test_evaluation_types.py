"""The figures an evaluation is summed up by (`ajet.evaluation_types`), alone: pass@k against counting every draw of
k samples, the mean reward, which episode passes, and the best evaluation of a task set."""

from __future__ import annotations

from itertools import combinations

import pytest

from ajet.evaluation_types import (
    EvalOutcome,
    EvaluationInfo,
    EvaluationRequest,
    best_of,
    pass_at_k,
    passed,
    summarise,
)


@pytest.mark.parametrize("n, c, k", [(4, 1, 2), (4, 0, 2), (5, 2, 3), (6, 6, 1), (3, 1, 3), (8, 3, 4)])
def test_pass_at_k_is_the_share_of_k_draws_that_hold_a_pass(n, c, k):
    draws = list(combinations([True] * c + [False] * (n - c), k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))


def test_a_task_with_fewer_samples_than_k_counts_by_all_of_them():
    assert pass_at_k(2, 1, 4) == 1.0 and pass_at_k(2, 0, 4) == 0.0


def test_an_evaluation_is_the_mean_over_tasks_and_episodes():
    rewards = {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0], "c": [1, 1, 0, 1]}
    outcomes = [EvalOutcome(t, float(r), r == 1) for t, rs in rewards.items() for r in rs]
    s = summarise(outcomes, k=2)
    assert (s.tasks, s.episodes) == (3, 12)
    assert s.mean_reward == pytest.approx(4 / 12)
    assert s.pass_at_k == pytest.approx((0.5 + 0.0 + 1.0) / 3)  # a: 1 - C(3,2)/C(4,2)


def test_an_episode_passes_by_its_clients_word_else_by_its_reward():
    assert passed(0.2, True, 1.0) and not passed(1.0, False, 1.0)
    assert passed(1.0, None, 1.0) and not passed(0.9, None, 1.0) and passed(0.5, None, 0.5)


def test_a_request_lists_each_episode_once():
    with pytest.raises(ValueError, match="an episode is listed twice"):
        EvaluationRequest(name="held_out", episode_uuids=["a", "a"])
    with pytest.raises(ValueError):
        EvaluationRequest(name="", episode_uuids=["a"])


def _info(i: int, name: str, pass_k: float, mean: float, versions: tuple[int, int]) -> EvaluationInfo:
    lo, hi = versions
    return EvaluationInfo(id=i, name=name, k=1, tasks=4, episodes=4, mean_reward=mean, pass_at_k=pass_k,
                          version_min=lo, version_max=hi, global_step=hi, created_at=0.0)  # fmt: skip


def test_the_best_evaluation_of_a_task_set_is_one_policys_highest():
    evals = [
        _info(1, "held_out", 0.5, 0.5, (1, 1)),
        _info(2, "held_out", 0.9, 0.9, (2, 3)),  # two policies served it: no version to export
        _info(3, "held_out", 0.75, 0.6, (3, 3)),
        _info(4, "held_out", 0.75, 0.7, (4, 4)),
        _info(5, "other", 1.0, 1.0, (5, 5)),
    ]
    assert best_of(evals, "held_out").id == 4
    assert best_of(evals, "missing") is None

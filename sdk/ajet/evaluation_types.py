"""Wire types of evaluations (`ajet.evaluation`, the proxy's evaluation routes) and the figures an evaluation is
summed up by: the mean reward and pass@k of a held-out task set's eval episodes, with the policy versions that
served them.

`summarise` is the one definition of those figures: the proxy computes every stored evaluation with it, from the
episodes as the store holds them, never from numbers a client sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Optional

from pydantic import Field, field_validator

from ajet.wire import AnswerModel, WireModel

MAX_EPISODES = 10_000
"""The most eval episodes one evaluation holds."""


class EvaluationRequest(WireModel):
    """Record an evaluation: the eval episodes it ran (every one ended with a reward)."""

    name: str = Field(min_length=1, max_length=128)
    """The task set's name (`held_out`): evaluations of one name are compared across policy versions."""
    k: int = Field(default=1, ge=1, le=1024)
    """pass@k's k: each task is sampled at least this many times."""
    episode_uuids: list[str] = Field(min_length=1, max_length=MAX_EPISODES)
    """The evaluation's episodes, each once: eval episodes of this experiment that ended with a reward."""
    pass_reward: float = 1.0
    """An episode passes when its client said `is_success`, or, where it said nothing, when its reward is at least
    this."""

    @field_validator("episode_uuids")
    @classmethod
    def _once_each(cls, uuids: list[str]) -> list[str]:
        if len(set(uuids)) != len(uuids):
            raise ValueError("an episode is listed twice")
        return uuids


class EvaluationsQuery(WireModel):
    """Which evaluations to list."""

    name: Optional[str] = Field(default=None, min_length=1, max_length=128)
    """Those of this task set alone (None: every one)."""


class EvaluationInfo(AnswerModel):
    """One stored evaluation."""

    id: int
    """Its number in the experiment (in the order they were recorded)."""
    name: str
    """The task set's name."""
    k: int
    """pass@k's k."""
    tasks: int
    """Distinct tasks (by `task_id`)."""
    episodes: int
    """Eval episodes (`tasks` times the samples per task, when each task was sampled alike)."""
    mean_reward: float
    """The mean of every episode's reward."""
    pass_at_k: float
    """The mean over tasks of the chance that k of a task's samples hold a passing one (the unbiased estimator
    1 - C(n - c, k) / C(n, k) of a task with n samples, c passing; a task with fewer than k samples counts by all
    of them)."""
    version_min: int
    """The oldest policy version that answered one of its calls."""
    version_max: int
    """The newest (equal to `version_min` when one policy served the whole evaluation)."""
    global_step: int
    """The experiment's step when it was recorded."""
    created_at: float
    """Unix time it was recorded."""


class EvaluationList(AnswerModel):
    """An experiment's evaluations, oldest first."""

    evaluations: list[EvaluationInfo]


@dataclass(frozen=True)
class EvalOutcome:
    """One eval episode as an evaluation counts it."""

    task_id: str
    """Its task (samples of one task share it)."""
    reward: float
    """The reward its client gave."""
    passed: bool
    """Whether it counts as a pass (`EvaluationRequest.pass_reward`)."""


@dataclass(frozen=True)
class Summary:
    """The figures of one evaluation."""

    tasks: int
    episodes: int
    mean_reward: float
    pass_at_k: float


def passed(reward: float, is_success: Optional[bool], pass_reward: float) -> bool:
    """Whether an episode passes: its client's `is_success`, else its reward against `pass_reward`."""
    return is_success if is_success is not None else reward >= pass_reward


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that k of a task's n samples, c of them passing, hold a pass (all n where n < k)."""
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarise(outcomes: list[EvalOutcome], k: int) -> Summary:
    """The figures of an evaluation's episodes (at least one)."""
    by_task: dict[str, list[bool]] = {}
    for o in outcomes:
        by_task.setdefault(o.task_id, []).append(o.passed)
    per_task = [pass_at_k(len(p), sum(p), k) for p in by_task.values()]
    return Summary(
        tasks=len(by_task),
        episodes=len(outcomes),
        mean_reward=sum(o.reward for o in outcomes) / len(outcomes),
        pass_at_k=sum(per_task) / len(per_task),
    )


def best_of(evaluations: list[EvaluationInfo], name: str) -> Optional[EvaluationInfo]:
    """The evaluation of task set `name` that scored highest (pass@k, then the mean reward, then the newest), among
    those one policy version served; None when there is none."""
    alone = [e for e in evaluations if e.name == name and e.version_min == e.version_max]
    return max(alone, key=lambda e: (e.pass_at_k, e.mean_reward, e.id), default=None)

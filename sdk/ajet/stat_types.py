"""Wire types of the statistics routes: rollout progress, open episodes, tasks, clients, steps, calls.

What `get_rollout_stat` and `get_episode` answer; the proxy builds them, the SDK, the monitor and
`print_rollout_stat` read them.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, StrictInt

from ajet.evaluation_types import EvaluationInfo
from ajet.types import AnswerModel, BatchMode, EpisodeStatus, EpisodeType, ExperimentStatus, WireModel


class BatchProgress(AnswerModel):
    """Progress of the rollout pool under one batch mode."""

    mode: BatchMode
    """The batch mode this progress is counted for."""
    current: int
    """Units (episodes or tasks) counted so far."""
    target: int
    """Units needed for a training step."""
    ready: bool
    """current >= target."""


class OpenEpisodeInfo(AnswerModel):
    """One running episode."""

    episode_uuid: str
    """The episode."""
    client_id: str
    """The client that began it."""
    episode_type: EpisodeType
    """train or eval."""
    age_s: float
    """Seconds since it began."""
    idle_s: float
    """Seconds since its last LLM call (or its start)."""
    timeout_s: float
    """Its discard timeout."""
    num_calls: int
    """LLM calls made so far."""


class TaskStat(AnswerModel):
    """Per-task counts among ended, not yet trained train episodes."""

    task_id: str
    """The task."""
    episodes: int
    """Ended episodes waiting for training."""
    reward_mean: float
    """Mean reward of those episodes."""
    dummy: bool
    """All rewards equal (no GRPO signal)."""


class MissionStat(AnswerModel):
    """Counts of one mission (a client's dataset + reward), across the store."""

    mission: str
    """The mission name (`-` for episodes begun without one)."""
    open: int
    """Episodes running."""
    ended: int
    """Episodes ended."""
    aborted: int
    """Episodes aborted or expired."""
    reward_mean: Optional[float] = None
    """Mean reward of its ended train episodes."""
    pooled: int = 0
    """Its ended episodes waiting in the rollout pool for a step."""
    max_batch_share: Optional[float] = None
    """Its cap in the job's mission mix: the most share of a batch its tasks may take (None: not capped)."""


class ClientInfo(AnswerModel):
    """One client seen by the proxy."""

    client_id: str
    """The client id the SDK sends."""
    last_seen_s: float
    """Seconds since its last control call."""
    begun: int
    """Episodes it began."""
    ended: int
    """Episodes it ended."""
    aborted: int
    """Episodes it aborted."""


class StepInfo(AnswerModel):
    """One finished training step."""

    step: int
    """The global step number."""
    policy_version: int
    """The policy version it produced."""
    num_episodes: int
    """Episodes it consumed."""
    reward_mean: Optional[float] = None
    """Mean reward of its batch."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """Its other metrics."""
    finished_at: float
    """Unix time it was recorded."""


class StepsRequest(WireModel):
    """Body of `POST /swarm/get_steps`: a page of the step history (the monitor reads it incrementally)."""

    after: StrictInt = Field(default=0, ge=0, le=2**31 - 1)
    """Only steps newer than this one."""
    limit: StrictInt = Field(default=1000, ge=1, le=10000)
    """At most this many steps, oldest first."""


class StepsPage(AnswerModel):
    """Answer of `POST /swarm/get_steps`."""

    steps: list[StepInfo]
    """Steps newer than `after`, oldest first; fewer than `limit` means there are no more yet."""


class RolloutStat(AnswerModel):
    """Answer of `GET /swarm/get_rollout_stat`: everything the SDK and the monitor show."""

    experiment: ExperimentStatus
    """The experiment: its state, step and policy version."""
    batch_mode: BatchMode
    """The batch mode in force."""
    batch_size: int
    """Tasks per step (from the job)."""
    num_repeat: int
    """Episodes per task (from the job)."""
    progress: list[BatchProgress]
    """Progress in all three modes."""
    open_episodes: list[OpenEpisodeInfo]
    """Running episodes."""
    tasks: list[TaskStat]
    """Per-task counts of the pool."""
    clients: list[ClientInfo]
    """Clients seen."""
    missions: list[MissionStat] = Field(default_factory=list)
    """Per-mission counts."""
    totals: dict[str, int]
    """Episodes by status, LLM calls and call errors since the store was created; `store_conflicts_retried`: the
    transactions PostgreSQL rolled back for a conflict (a deadlock) that the answering proxy ran again since it
    started."""
    recent_steps: list[StepInfo]
    """The latest training steps, newest last."""
    last_evaluation: Optional[EvaluationInfo] = None
    """The newest evaluation of a held-out task set (`ajet.evaluate`), if any."""


class CallInfo(AnswerModel):
    """One logged LLM call of an episode, for inspection."""

    seq: int
    """Order in the episode."""
    messages: list[dict[str, Any]]
    """The request's messages."""
    response: str
    """The answer's text (and tool calls, as JSON) as the agent received it."""
    prompt_tokens: Optional[int] = None
    """Prompt token count (None when the engine gave no ids)."""
    completion_tokens: Optional[int] = None
    """Completion token count (None when the engine gave no ids)."""
    finish_reason: Optional[str] = None
    """Why generation stopped."""
    latency_ms: float
    """Wall time through the proxy."""
    policy_version: int
    """Policy version that answered."""
    stream: bool
    """Whether it was streamed."""
    error: Optional[str] = None
    """Error text of a failed call."""


class EpisodeDetail(AnswerModel):
    """Answer of `POST /swarm/get_episode`: one episode and its calls."""

    episode_uuid: str
    """The episode."""
    client_id: str
    """The client that began it."""
    status: EpisodeStatus
    """Its status."""
    episode_type: EpisodeType
    """train or eval."""
    task_id: Optional[str] = None
    """Its task (known once ended)."""
    reward: Optional[float] = None
    """Its reward (ended episodes)."""
    untrainable: bool = False
    """Flagged because a call lacked token ids."""
    consumed_step: Optional[int] = None
    """The training step that used it."""
    calls: list[CallInfo]
    """Its LLM calls, in order."""

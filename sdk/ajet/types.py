"""Wire and RL types shared by the SDK, the proxy and the trainer.

Every HTTP body of the control API is defined here, once. The proxy imports these models; the SDK
never imports the proxy. All models are pydantic v2; request models forbid unknown fields so a typo
in a client is a 422 naming the field, not a silently ignored value.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

EpisodeType = Literal["train", "eval"]


class EngineState(str, Enum):
    """The engine states, shared by proxy and trainer and kept in the store."""

    OFFLINE = "OFFLINE"
    BOOTING = "BOOTING"
    ROLLING = "ROLLING"
    ROLLING_POST = "ROLLING_POST"
    WEIGHT_SYNCING = "WEIGHT_SYNCING"


class EpisodeStatus(str, Enum):
    """Life cycle of one episode in the store."""

    OPEN = "open"
    ENDED = "ended"
    ABORTED = "aborted"
    EXPIRED = "expired"


class BatchMode(str, Enum):
    """When the rollout pool is full enough for one training step."""

    EPISODES = "rollout_until_finish_enough_episodes"
    TASKS = "rollout_until_finish_enough_tasks"
    NON_DUMMY_TASKS = "rollout_until_finish_enough_non_dummy_tasks"


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- RL types


class Task(BaseModel):
    """One task of a dataset; GRPO groups the episodes of one `task_id`."""

    model_config = ConfigDict(extra="allow")

    task_id: str = Field(min_length=1)
    """Stable identifier of the task; the GRPO group key. Must not be empty."""
    main_query: str = ""
    """The task's main text (a question, an instruction)."""
    init_messages: list[dict[str, Any]] = Field(default_factory=list)
    """Optional chat messages to start the agent with."""
    env_type: str = ""
    """Free-form name of the environment the task belongs to."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Everything else the dataset row carried (reference answers, ...)."""


class WorkflowOutput(BaseModel):
    """What an agent run reports at `end_episode`: in swarm mode one scalar reward."""

    model_config = ConfigDict(extra="allow")

    reward: Optional[float] = None
    """The episode's scalar reward; must be finite. None is refused by `end_episode`."""
    is_success: Optional[bool] = None
    """Optional success flag, for statistics only."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data stored with the episode."""
    log_metrics: dict[str, float] = Field(default_factory=dict)
    """Numbers to aggregate per training step (stored with the episode)."""

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number (NaN and infinity are refused)")
        return v


class OpenaiBaseUrlAndApiKey(BaseModel):
    """What an agent needs to call the policy: any OpenAI-compatible SDK takes these."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    """The proxy's OpenAI-compatible base URL (ends with `/v1`)."""
    api_key: str
    """The episode key; valid only while the episode is open."""
    model: str
    """A model name to send; the proxy routes every call to the current policy anyway."""
    episode_uuid: str
    """The episode this key belongs to."""

    def as_openai_client(self, **kwargs: Any) -> Any:
        """A ready `openai.OpenAI` client (openai is imported lazily)."""
        import openai

        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def as_async_openai_client(self, **kwargs: Any) -> Any:
        """A ready `openai.AsyncOpenAI` client (openai is imported lazily)."""
        import openai

        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)


# --------------------------------------------------------------------------- control API bodies


class SyncTrainConfigRequest(_Wire):
    """Body of `POST /swarm/sync_train_config`."""

    job: dict[str, Any]
    """The job as `AgentJetJob.model_dump()` produces it."""


class AutoSyncRequest(_Wire):
    """Body of `POST /swarm/auto_sync_train_config_and_start_engine`."""

    job: dict[str, Any]
    """The job as `AgentJetJob.model_dump()` produces it."""
    force_restart: bool = False
    """Stop the engine first, whatever it is doing."""


class BeginEpisodeRequest(_Wire):
    """Body of `POST /swarm/begin_episode`."""

    discard_episode_timeout: float = Field(default=240.0, gt=0, le=7 * 24 * 3600)
    """Seconds of inactivity after which the episode expires and its key stops working."""
    episode_type: EpisodeType = "train"
    """`train` episodes feed training; `eval` episodes never do."""
    mission: Optional[str] = Field(default=None, max_length=128)
    """Which mission (dataset + reward) the episode belongs to, for statistics."""


class BeginEpisodeResponse(_Wire):
    """Answer of `POST /swarm/begin_episode`."""

    episode_uuid: str
    """The new episode's id."""
    api_key: str
    """The episode key (shown once; the store keeps only its hash)."""
    base_url: str
    """The OpenAI-compatible base URL as the proxy sees itself."""
    model: str
    """The model name to send (any name is routed to the policy)."""
    policy_version: int
    """The policy version when the episode began."""


class EndEpisodeRequest(_Wire):
    """Body of `POST /swarm/end_episode`."""

    episode_uuid: str = Field(min_length=1)
    """The episode to end."""
    task: Task
    """The task the episode ran; its `task_id` is the GRPO group."""
    workflow_output: WorkflowOutput
    """The result; `reward` must be a finite number."""

    @field_validator("workflow_output")
    @classmethod
    def _reward_present(cls, v: WorkflowOutput) -> WorkflowOutput:
        if v.reward is None:
            raise ValueError("reward is required to end an episode (use abort_episode to discard)")
        return v


class EpisodeUuidRequest(_Wire):
    """Body of `POST /swarm/abort_episode`."""

    episode_uuid: str = Field(min_length=1)
    """The episode to act on."""


class EpisodeResult(_Wire):
    """Answer of `end_episode` and `abort_episode`."""

    episode_uuid: str
    """The episode."""
    status: EpisodeStatus
    """Its status after the call."""
    reward: Optional[float] = None
    """The stored reward (ended episodes)."""


class SetBatchModeRequest(_Wire):
    """Body of `POST /swarm/set_batch_mode`."""

    mode: BatchMode
    """The batch policy for the next training step."""


class EngineStatus(_Wire):
    """Answer of `GET /swarm/get_engine_status` and part of the rollout stats."""

    state: EngineState
    """The current engine state."""
    state_seconds: float
    """Seconds since the engine entered this state."""
    global_step: int
    """Training steps completed."""
    policy_version: int
    """The version of the weights now serving (0 = the base model)."""
    job_synced: bool
    """Whether a job configuration has been synced."""
    experiment_name: Optional[str] = None
    """The synced job's experiment name."""


class OkResponse(_Wire):
    """Answer of control calls that only change state."""

    ok: bool = True
    """Always true; failures are HTTP errors."""
    state: EngineState
    """The engine state after the call."""


# --------------------------------------------------------------------------- stats


class BatchProgress(_Wire):
    """Progress of the rollout pool under one batch mode."""

    mode: BatchMode
    """The batch mode this progress is counted for."""
    current: int
    """Units (episodes or tasks) counted so far."""
    target: int
    """Units needed for a training step."""
    ready: bool
    """current >= target."""


class OpenEpisodeInfo(_Wire):
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


class TaskStat(_Wire):
    """Per-task counts among ended, not yet trained train episodes."""

    task_id: str
    """The task."""
    episodes: int
    """Ended episodes waiting for training."""
    reward_mean: float
    """Mean reward of those episodes."""
    dummy: bool
    """All rewards equal (no GRPO signal)."""


class MissionStat(_Wire):
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


class ClientInfo(_Wire):
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


class StepInfo(_Wire):
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


class RolloutStat(_Wire):
    """Answer of `GET /swarm/get_rollout_stat`: everything the SDK and the monitor show."""

    engine: EngineStatus
    """The engine."""
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
    """Episodes by status, LLM calls and call errors since the store was created."""
    recent_steps: list[StepInfo]
    """The latest training steps, newest last."""


class CallInfo(_Wire):
    """One logged LLM call of an episode, for inspection."""

    seq: int
    """Order in the episode."""
    messages: list[dict[str, Any]]
    """The request's messages."""
    response: str
    """The answer's text (and tool calls, as JSON) as the agent received it."""
    prompt_tokens: Optional[int] = None
    """Prompt token count (None when the backend gave no ids)."""
    completion_tokens: Optional[int] = None
    """Completion token count (None when the backend gave no ids)."""
    finish_reason: Optional[str] = None
    """Why generation stopped."""
    latency_ms: float
    """Wall time through the proxy."""
    policy_version: int
    """Weights version that answered."""
    stream: bool
    """Whether it was streamed."""
    error: Optional[str] = None
    """Error text of a failed call."""


class EpisodeDetail(_Wire):
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


class ErrorBody(_Wire):
    """Body of every error answer."""

    error: str
    """The error class (e.g. `WrongState`, `InvalidInput`)."""
    detail: str
    """A human-readable reason."""
    state: Optional[str] = None
    """The engine state, where the error depends on it."""
    fields: list[str] = Field(default_factory=list)
    """The offending fields of a malformed body."""

"""Wire and RL types shared by the SDK, the proxy and the trainer.

Every HTTP body of the control API is defined here, once. The proxy imports these models; the SDK
never imports the proxy. All models are pydantic v2; request models forbid unknown fields so a typo
in a client is a 422 naming the field, not a silently ignored value.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from ajet.episode_pool import async_pool, sync_pool
from ajet.storable import EpisodeUuid, check_storable, unstorable
from ajet.template_verdict import TemplateVerdict
from ajet.wire import AnswerModel, WireModel

EpisodeType = Literal["train", "eval"]


class ExperimentState(str, Enum):
    """Where an experiment is in its life cycle, shared by proxy and trainer and kept in the store:
    OFFLINE -> BOOTING -> ROLLING -> ROLLING_POST -> WEIGHT_SYNCING -> ROLLING ... (the seeds call it
    `EngineState`, which names this same class)."""

    OFFLINE = "OFFLINE"
    BOOTING = "BOOTING"
    ROLLING = "ROLLING"
    ROLLING_POST = "ROLLING_POST"
    WEIGHT_SYNCING = "WEIGHT_SYNCING"


EngineState = ExperimentState
"""The seeds' name of `ExperimentState` (AgentJet's `start_engine` starts an experiment)."""


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


# --------------------------------------------------------------------------- RL types


class Task(BaseModel):
    """One task of a dataset; GRPO groups the episodes of one `task_id`."""

    model_config = ConfigDict(extra="allow")

    task_id: str = Field(min_length=1, max_length=512)
    """Stable identifier of the task; the GRPO group key. 1 to 512 characters."""
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
    is_success: Optional[bool] = Field(default=None, strict=True)
    """Optional success flag, for statistics only: a boolean (not "yes", not 1)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form data stored with the episode."""
    log_metrics: dict[str, float] = Field(default_factory=dict)
    """Numbers to aggregate per training step (stored with the episode): finite JSON numbers."""

    @field_validator("reward", mode="before")
    @classmethod
    def _a_number(cls, v: Any) -> Any:
        if isinstance(v, (str, bool)):  # "1.0" and true are not rewards, whatever they coerce to
            raise ValueError(f"reward must be a number, not {type(v).__name__} {v!r}")
        return v

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be a finite number (NaN and infinity are refused)")
        return v

    @field_validator("log_metrics", mode="before")
    @classmethod
    def _finite_numbers(cls, v: Any) -> Any:
        for name, value in (v or {}).items() if isinstance(v, dict) else ():
            if isinstance(value, (str, bool)) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"log_metrics[{name!r}] must be a finite number, not {value!r}")
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
        """A ready `openai.OpenAI` client (openai is imported lazily: `pip install 'agentjet-swarm[client]'`), on the
        process's one connection pool (`ajet.episode_pool`) unless `http_client` is given."""
        openai = _openai()
        kwargs.setdefault("http_client", sync_pool())
        return openai.OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    def as_async_openai_client(self, **kwargs: Any) -> Any:
        """A ready `openai.AsyncOpenAI` client (openai is imported lazily), on the running loop's one connection pool
        (`ajet.episode_pool`) unless `http_client` is given or no loop is running."""
        openai = _openai()
        pool = async_pool()
        if pool is not None:
            kwargs.setdefault("http_client", pool)
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)


def _openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ImportError("as_openai_client needs the OpenAI SDK: pip install 'agentjet-swarm[client]'") from exc
    return openai


# --------------------------------------------------------------------------- control API bodies


class SyncTrainConfigRequest(WireModel):
    """Body of `POST /swarm/sync_train_config`."""

    job: dict[str, Any]
    """The job as `AgentJetJob.model_dump()` produces it."""

    @field_validator("job", mode="before")
    @classmethod
    def _storable_job(cls, v: Any) -> Any:
        return check_storable(v, "job")


class AutoSyncRequest(WireModel):
    """Body of `POST /swarm/auto_sync_train_config_and_start_engine`."""

    job: dict[str, Any]
    """The job as `AgentJetJob.model_dump()` produces it."""

    @field_validator("job", mode="before")
    @classmethod
    def _storable_job(cls, v: Any) -> Any:
        return check_storable(v, "job")

    force_restart: StrictBool = False
    """Stop the engine first, whatever it is doing (a JSON boolean: 0 and "yes" are refused)."""


class BeginEpisodeRequest(WireModel):
    """Body of `POST /swarm/begin_episode`."""

    discard_episode_timeout: float = Field(default=240.0, gt=0, le=7 * 24 * 3600)
    """Seconds of inactivity after which the episode expires and its key stops working."""
    episode_type: EpisodeType = "train"
    """`train` episodes feed training; `eval` episodes never do."""
    mission: Optional[str] = Field(default=None, max_length=128)
    """Which mission (dataset + reward) the episode belongs to, for statistics."""
    request_id: Optional[str] = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    """The client's id for this begin (32 hex digits), the same on each retry of it: a begin the server
    committed but whose answer was lost (a dropped connection, a read timeout) is answered again on the retry,
    with the same episode and a fresh key, instead of leaving an episode nobody holds open."""

    @field_validator("mission", mode="before")
    @classmethod
    def _storable_mission(cls, v: Any) -> Any:
        return check_storable(v, "mission")


class EpisodeContinuation(AnswerModel):
    """Answer of `POST /swarm/can_continue_episode`: whether a long agent should go on."""

    episode_uuid: str
    """The episode asked about."""
    can_continue: bool
    """True while the episode is open (its key works); False once it ended, was aborted or expired."""
    status: Optional[EpisodeStatus] = None
    """The episode's status in the store (None: no episode has that id)."""
    reason: Optional[str] = None
    """Why it cannot continue (e.g. "expired after 240 s without a call"), when it cannot."""


class BeginEpisodeResponse(AnswerModel):
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


class EpisodeOutcome(WorkflowOutput):
    """A `WorkflowOutput` as `end_episode` takes it: the reward is required (the API description says so)."""

    reward: float  # narrowed: Optional in the SDK type (seed code builds it empty), required on the wire
    """The episode's scalar reward: a finite JSON number (no strings, no booleans)."""

    @model_validator(mode="before")
    @classmethod
    def _reward_present(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("reward") is None:
            raise ValueError("reward is required to end an episode (use abort_episode to discard)")
        return data


class EndEpisodeRequest(WireModel):
    """Body of `POST /swarm/end_episode`."""

    episode_uuid: EpisodeUuid
    """The episode to end."""
    task: Task
    """The task the episode ran; its `task_id` is the GRPO group."""
    workflow_output: EpisodeOutcome
    """The result; `reward` must be a finite number."""

    @field_validator("task", "workflow_output")
    @classmethod
    def _storable_parts(cls, v: BaseModel, info: ValidationInfo) -> BaseModel:
        check_storable(v.model_dump(), str(info.field_name))  # after each part's own checks (a NaN reward names reward)
        return v

    @field_validator("task", "workflow_output", mode="before")
    @classmethod
    def _keys_as_sent(cls, v: Any, info: ValidationInfo) -> Any:
        """Keys are checked as sent: validating `dict[str, Any]` rewrites a lone surrogate in a key (as U+FFFD)."""
        why = unstorable(v, str(info.field_name), keys_only=True)
        if why is not None:
            raise ValueError(why)
        return v

    @property
    def reward(self) -> float:
        """The episode's reward (present: the validator refused a body without one)."""
        reward = self.workflow_output.reward
        assert reward is not None
        return float(reward)


class EpisodeUuidRequest(WireModel):
    """Body of `POST /swarm/abort_episode`."""

    episode_uuid: EpisodeUuid
    """The episode to act on."""


class EpisodeResult(AnswerModel):
    """Answer of `end_episode` and `abort_episode`."""

    episode_uuid: str
    """The episode."""
    status: EpisodeStatus
    """Its status after the call."""
    reward: Optional[float] = None
    """The stored reward (ended episodes)."""
    warning: Optional[str] = None
    """Set when the episode was ended but will never train (e.g. it made no LLM calls); the SDK logs it."""


class SetBatchModeRequest(WireModel):
    """Body of `POST /swarm/set_batch_mode`."""

    mode: BatchMode
    """The batch policy for the next training step."""


class ExperimentStatus(AnswerModel):
    """Answer of `GET /swarm/get_engine_status` and part of the rollout stats."""

    state: ExperimentState
    """The current experiment's state."""
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
    last_error: Optional[str] = None
    """The trainer's last failure (a refused boot, an update that raised; None when all went well)."""
    last_error_age_s: Optional[float] = None
    """Seconds since `last_error` happened."""
    boot_failed: bool = False
    """The engine is OFFLINE because booting the synced job failed (`last_error` says why): `begin_episode`
    raises `BootFailed` until a client starts the engine again."""
    updating: bool = False
    """An asynchronous update (job `max_staleness >= 1`) is running while the state stays ROLLING: episodes
    begin and call the LLM meanwhile, and the new weights go live when it ends."""
    updating_seconds: Optional[float] = None
    """Seconds the running asynchronous update has taken so far (None when none runs)."""
    trainer_silent_s: Optional[float] = None
    """Seconds since the trainer's last heartbeat, once that is over the store's timeout (30 s): the trainer is
    down or cannot write, and `begin_episode` answers `TrainerUnresponsive` (None while it beats)."""
    trainer_timeout_s: Optional[float] = None
    """The swarm's `trainer_timeout_s`: how long a trainer may write no heartbeat before begins are refused."""
    trainer_stopped_s: Optional[float] = None
    """Seconds since the trainer stopped and said so in the store (it exited: SIGTERM, Ctrl-C, an error it logged);
    `begin_episode` answers `TrainerStopped` at once until a trainer is started again (None while one holds it)."""
    template: Optional[TemplateVerdict] = None
    """The trainer's template preflight of the synced job's model (None until a trainer has run it)."""


class SwarmExperiment(AnswerModel):
    """One experiment of the swarm, as `list_experiments` and `stop_swarm` answer it."""

    name: Optional[str]
    """Its job's `project_name/experiment_name`, what `SwarmClient(experiment=...)` takes (None: the swarm's default
    experiment before any job was synced)."""
    slug: str
    """Its slug: where the explorer shows it (`/explore/x/<slug>/`) and how engines name its adapter; `default` for
    the default experiment."""
    default: bool
    """The swarm's default experiment (its store is the one the proxy's `--db` names; a client that names no
    experiment acts on it)."""
    status: ExperimentStatus
    """Its state, step, policy version and last error."""


class ProxyHealth(AnswerModel):
    """Answer of `GET /health` (open without the swarm token: liveness)."""

    status: str
    """`ok`."""
    state: str
    """The default experiment's state."""
    proxies: int
    """The swarm's live proxies, this one included, at its last beat: they split each experiment's
    `max_calls_in_flight` (1 where the proxy owns its store)."""


class ExperimentList(AnswerModel):
    """Answer of `GET /swarm/list_experiments` and `POST /swarm/stop_swarm`: every experiment of the swarm, the
    default first, then by name."""

    experiments: list[SwarmExperiment]
    """The experiments, as they are after the call."""


class OkResponse(AnswerModel):
    """Answer of control calls that only change state."""

    ok: bool = True
    """Always true; failures are HTTP errors."""
    state: ExperimentState
    """The experiment's state after the call."""
    template: Optional[TemplateVerdict] = None
    """Answers of `sync_train_config` and `auto_sync_train_config_and_start_engine`: the trainer's template
    preflight of the job's model (which agent shapes merge into one sequence, which fall back and why), once the
    trainer has run it; None when no trainer answered within the proxy's `preflight_wait_s`."""

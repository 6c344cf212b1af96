"""Row and record types of the store (frozen dataclasses): the contract between proxy and trainer.

The HTTP wire types live in `ajet.types`; these are what the store returns and what the proxy's call
log writes. The trainer reads episodes and calls through these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ajet.job import AgentJetJob
from ajet.template_verdict import TemplateVerdict
from ajet.types import BatchMode, EpisodeStatus, ExperimentState
from ajet_core.engine_answer import VersionSpans

BOOT_FAILED = "boot failed: "
"""How the trainer's `last_error` begins when a boot failed (it moves the experiment OFFLINE with it)."""


@dataclass(frozen=True)
class ExperimentRow:
    """An experiment's row of its store (each experiment has a store of its own, and its row there is id 1)."""

    state: ExperimentState
    """Where the experiment is in its life cycle."""
    state_since: float
    """Unix time the state was entered."""
    job: Optional[AgentJetJob]
    """The synced job, parsed (`AgentJetJob.from_stored`); None before the first sync."""
    global_step: int
    """Training steps recorded."""
    policy_version: int
    """Version of the weights now serving."""
    batch_mode: BatchMode
    """Batch policy in force for the next step."""
    engines_version: int
    """Bumped whenever an engine is registered, changed or removed (the proxy reloads its router then)."""
    run_id: int = 0
    """Bumped when a different job is synced; the rollout pool holds only this run's episodes."""
    trainer_heartbeat: Optional[float] = None
    """Unix time of the trainer's last sign of life (None: no trainer has written one)."""
    last_error: Optional[str] = None
    """The trainer's last failure (a boot refused, an update that raised), shown by the monitor and status."""
    last_error_at: Optional[float] = None
    """Unix time of `last_error`."""
    update_failures: int = 0
    """Failed updates of the current batch in a row; at `QUARANTINE_AFTER` the batch is quarantined."""
    updating_since: Optional[float] = None
    """Unix time an asynchronous update (`max_staleness >= 1`) began while rollouts go on; None when no update
    runs beside ROLLING (a synchronous update shows as WEIGHT_SYNCING instead)."""
    template_verdict: Optional[TemplateVerdict] = None
    """The trainer's template preflight of the synced job's model (None until a trainer has run it; cleared when a
    job of another model is synced)."""
    trainer_host: Optional[str] = None
    """The host of the trainer that holds the store (`Store.claim_trainer`): one trainer per store."""
    trainer_pid: Optional[int] = None
    """Its process id on that host."""
    trainer_alone: Optional[str] = None
    """Why that trainer trains one experiment only (its backend or engine: a sync that would start a second
    experiment is refused with this reason); None when it can train several, or before a trainer claimed the store."""
    trainer_stopped_at: Optional[float] = None
    """Unix time the trainer that held the store stopped cleanly (SIGTERM, Ctrl-C: `Store.release_trainer`); begins
    are refused at once with `TrainerStopped` until a trainer claims the store again. None: a trainer holds it, or
    none stopped cleanly (a killed one is found by its heartbeat)."""

    @property
    def boot_failed(self) -> bool:
        """OFFLINE because booting the synced job failed: the trainer recorded the failure (`BOOT_FAILED`) in the
        same transaction that moved the experiment OFFLINE, and nothing has started it since."""
        return (
            self.state == ExperimentState.OFFLINE
            and self.last_error is not None
            and self.last_error.startswith(BOOT_FAILED)
            and self.last_error_at is not None
            and self.last_error_at >= self.state_since
        )


@dataclass(frozen=True)
class ExperimentEntry:
    """An experiment of the swarm as the catalog lists it (`ajet_store.Catalog.entries`): the default (its
    `created_at` 0, named after its job) or one the first store lists beside it (`ajet_store.catalog`)."""

    name: str
    """`project_name/experiment_name` of its job: what names the experiment to clients."""
    slug: str
    """The name made safe for a file or schema name, with a hash of the whole name: where its store lives."""
    created_at: float
    """Unix time the experiment was first listed."""


@dataclass(frozen=True)
class RegisteredEngine:
    """An inference engine as the trainer registered it in the store: where the proxy sends calls."""

    name: str
    """Unique engine name (`embedded-0`, `vllm-1`, `verl-vllm-0`)."""
    base_url: str
    """OpenAI-compatible base URL (ends with `/v1`)."""
    model: str
    """Model name to send to the engine (a LoRA adapter name for vLLM)."""
    policy_version: int
    """The policy version it serves."""
    api_key: Optional[str] = None
    """The engine's internal key, sent as a Bearer token by the proxy only (None: the engine takes no key).
    Kept in the store, which only its owner can read (0600)."""


@dataclass(frozen=True)
class EpisodeRow:
    """One episode as stored."""

    uuid: str
    """Episode id."""
    key_hash: str
    """sha256 of the episode key."""
    client_id: str
    """Client that began it."""
    episode_type: str
    """`train` or `eval`."""
    status: EpisodeStatus
    """Life-cycle status."""
    created_at: float
    """Unix time it began."""
    last_active_at: float
    """Unix time of its last LLM call (or start)."""
    timeout_s: float
    """Discard timeout in seconds."""
    policy_version_start: int
    """Policy version when it began."""
    num_calls: int = 0
    """LLM calls logged."""
    calls_reserved: int = 0
    """Call numbers taken so far by proxies that share the store (`Store.reserve_calls`; 0 for a single proxy,
    which numbers in memory)."""
    task_id: Optional[str] = None
    """Task id given at end."""
    reward: Optional[float] = None
    """Reward given at end."""
    is_success: Optional[bool] = None
    """Success flag given at end."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Workflow output metadata and log metrics."""
    ended_at: Optional[float] = None
    """Unix time it ended, aborted or expired."""
    consumed_step: Optional[int] = None
    """The training step that consumed it."""
    untrainable: bool = False
    """True when a call lacked token ids; never trained."""
    untrainable_reason: Optional[str] = None
    """Why it is untrainable."""
    mission: Optional[str] = None
    """The mission label the client gave."""


@dataclass(frozen=True)
class BeginEpisode:
    """A change for `Store.apply_changes`: open an episode (only while ROLLING with a live trainer)."""

    uuid: str
    """The new episode's id."""
    key_hash: str
    """sha256 of the key minted for it (the key itself is never stored)."""
    client_id: str
    """The client that begins it (and alone may end or abort it)."""
    episode_type: str
    """`train` (trained on) or `eval` (logged only)."""
    timeout_s: float
    """Seconds without a call after which it is expired and its key stops working."""
    mission: Optional[str] = None
    """The mission label the client gave (for a job's mission mix), if any."""
    retryable: bool = False
    """Whether `uuid` is the client's retry-stable id of this begin: a begin whose episode exists already (the
    client lost the first answer) gives that open, unused episode the new `key_hash` instead of failing."""


@dataclass(frozen=True)
class EndEpisode:
    """A change for `Store.apply_changes`: record an open episode's reward (ending it again with the same task and
    reward is harmless)."""

    uuid: str
    """The episode to end."""
    client_id: str
    """The client ending it: must be the one that began it."""
    task_id: str
    """Its task: the GRPO group it trains in."""
    reward: float
    """Its scalar reward (already checked finite and within the job's bound by the caller)."""
    is_success: Optional[bool]
    """The client's success flag, kept for statistics."""
    metadata: dict[str, Any]
    """Workflow output metadata, log metrics and the task, kept as JSON."""


EpisodeChange = Union[BeginEpisode, EndEpisode]
"""One episode life-cycle change that `Store.apply_changes` group-commits with others."""


@dataclass(frozen=True)
class CallImage:
    """One image of a call's prompt, as the engine used it."""

    sha256: str  # the file's: its row in the store's `images` table
    grid: Optional[tuple[int, int, int]] = None
    """The patch grid (temporal, height, width) the engine's processor made of it (None: the engine did not say)."""


@dataclass(frozen=True)
class StoredImage:
    """An image file as the store keeps it, once, by its hash."""

    sha256: str
    mime: str
    """Its media type: image/png, image/jpeg or image/webp."""
    width: int
    height: int
    data: bytes


@dataclass(frozen=True)
class CallRecord:
    """One logged LLM call, with the exact token ids the engine produced."""

    episode_uuid: str
    """The episode."""
    seq: int
    """Order of the call in its episode (0-based)."""
    request: str
    """The agent's request body (JSON text)."""
    response: Optional[str]
    """The engine's answer (JSON text; for streams, the assembled answer)."""
    prompt_ids: Optional[list[int]]
    """Prompt token ids as the engine tokenised them."""
    completion_ids: Optional[list[int]]
    """Completion token ids the engine sampled."""
    logprobs: Optional[list[float]]
    """Log-probability of each completion token."""
    finish_reason: Optional[str]
    """Why generation stopped."""
    policy_version: int
    """Policy version that produced the answer."""
    engine: Optional[str]
    """Name of the engine that answered (None: refused before any engine was picked)."""
    latency_ms: float
    """Wall time through the proxy."""
    created_at: float
    """Unix time the answer finished."""
    stream: bool = False
    """Whether the call was streamed."""
    error: Optional[str] = None
    """Error text if the call failed."""
    token_history: Optional[str] = None
    """How the proxy built the prompt (`ajet_token_history.rules`): `first` (the episode's first call),
    `extended` (an earlier turn's prompt + completion ids + the new messages' tokens: token in, token out),
    `rendered` (the job asked for rendered history), `segment:<cause>` (the call starts a new conversation in the
    episode: `new_conversation`, `compacted`), `fallback:<reason>` (the call shares an earlier turn's history but
    edits it, e.g. `fallback:answer_edited`, and was rendered whole); None for calls logged before schema 6."""
    parent_seq: Optional[int] = None
    """The number of the earlier call whose turn this call continued exactly (label `extended`); None otherwise."""
    response_id: Optional[str] = None
    """The Responses API's id of the answer (`resp_...`), for a `previous_response_id` that reaches another proxy
    (None for chat and Messages calls)."""
    truncated: bool = False
    """The server's limit ended the answer (finish reason `length`: the job's `max_response_length_in_one_turn`, or
    the model's context) where the client asked for no smaller limit. The agent got it as a finished turn; the
    job's `overlong` rule decides how it trains."""
    client_gone: bool = False
    """The client went away before the answer reached it (a stream left before its end, or a plain call whose
    connection closed before the answer was written); its `error` says so, and it is never trained."""
    version_spans: Optional[VersionSpans] = None
    """The engine's `policy_version_spans`: (offset of the first completion token, policy version) of each run of
    the answer one version sampled, when an update came mid-answer (partial rollouts); None: `policy_version`
    sampled it all."""

    images: Optional[tuple[CallImage, ...]] = None
    """The prompt's images in the order of their placeholder runs (None: none); each file is in the store's `images`
    table, and the logged request names it `ajet-image:<sha256>` instead of carrying its bytes."""

    def version_at(self, offset: int) -> int:
        """The policy version that sampled completion token `offset`."""
        version = self.policy_version
        for start, v in self.version_spans or ():
            if start <= offset:
                version = v
        return version

    @property
    def trainable(self) -> bool:
        """A successful call with both token id lists."""
        return self.error is None and self.prompt_ids is not None and self.completion_ids is not None


@dataclass(frozen=True)
class PoolEpisode:
    """An ended, not yet consumed train episode: as the batch policies see it, then, with every call it made
    (`Store.rewarded_episodes`), what a training step turns into samples."""

    uuid: str
    """Episode id."""
    task_id: str
    """GRPO group."""
    reward: float
    """Its reward."""
    ended_at: float = 0.0
    """Unix time it ended (for first-come ordering)."""
    mission: Optional[str] = None
    """The mission it belongs to (what a mission mix caps)."""
    oldest_version: int = 0
    """The policy version of its oldest call (of its start when it made none): how far behind the policy being
    trained its data is, which an asynchronous batch bounds (`max_staleness`)."""
    calls: tuple[CallRecord, ...] = ()
    """Its LLM calls in order, with the exact token ids the engine produced (read for a step's batch only)."""


@dataclass(frozen=True)
class TrainSequence:
    """One training sequence: a prompt and a response built from one or more merged LLM calls."""

    episode_uuid: str
    """The episode it came from."""
    task_id: str
    """GRPO group of its episode."""
    prompt_ids: tuple[int, ...]
    """Prompt token ids of the first merged call (as the engine tokenised them)."""
    response_ids: tuple[int, ...]
    """Completions and the tokens inserted between them, in order."""
    response_mask: tuple[int, ...]
    """1 for tokens the policy sampled (trained), 0 for inserted ones (tool output, user turns)."""
    rollout_logprobs: tuple[float, ...]
    """The engine's log-prob of each response token (0.0 where the mask is 0)."""
    num_calls: int = 1
    """How many LLM calls were merged into it."""
    images: tuple[str, ...] = ()
    """Its images' hashes (the store's `images`), in the order of their placeholder runs in its ids."""


@dataclass(frozen=True)
class RewardVersion:
    """One re-scoring: a reward function applied to a selection of stored episodes. Version 0 is the reward each
    client gave at `end_episode`, kept in the episode's row and never overwritten."""

    version: int
    """1, 2, ...: the order re-scorings were begun in."""
    function: str
    """The reward function, as `module:function`."""
    source_hash: str
    """sha256 of the function's source: the same name with other code is another version."""
    selection: dict[str, Any]
    """The `EpisodeSelection` it scores, as JSON."""
    created_at: float
    """Unix time it was begun."""
    finished_at: Optional[float]
    """Unix time every selected episode had a score (None: begun, not finished; a re-run resumes it)."""
    scored: int
    """Episodes it gave a reward."""
    failed: int
    """Episodes on which the function raised (each stored with its error)."""


@dataclass(frozen=True)
class EpisodeReward:
    """An episode's reward under one reward version."""

    episode_uuid: str
    """The episode."""
    version: int
    """The reward version (0: the client's own)."""
    reward: Optional[float]
    """The reward (None when the function raised on this episode)."""
    is_success: Optional[bool] = None
    """The success flag the function gave, if any."""
    error: Optional[str] = None
    """What the function raised on this episode (None: it scored it)."""

"""The control API: one route per SDK method, under `/swarm/`, with the same names.

Handlers are plain `def`s (FastAPI runs them in its thread pool), so store transactions never block
the event loop that serves the data plane; the episode life cycle (begin, end, abort), the hot path,
runs its store work on the proxy's one episode thread instead (`ExperimentHost.in_episode_thread`). With a
swarm token configured, every route here needs it (checked by `auth.SwarmTokenMiddleware` before the body
is read); an episode key never grants control.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from typing import Optional

from fastapi import APIRouter, Request

from ajet.errors import BootFailed, EpisodeNotFound, InvalidRequest, NotReady, TrainerUnresponsive
from ajet.job import AgentJetJob
from ajet.protocol import CLIENT_HEADER
from ajet.stat_types import EpisodeDetail, RolloutStat, StepsPage, StepsRequest
from ajet.types import (
    BeginEpisodeRequest,
    BeginEpisodeResponse,
    EndEpisodeRequest,
    EpisodeContinuation,
    EpisodeResult,
    EpisodeStatus,
    EpisodeUuidRequest,
    ExperimentState,
    ExperimentStatus,
    OkResponse,
    SetBatchModeRequest,
)
from ajet_proxy.api_docs import CONTROL_ERRORS
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.open_episodes import (
    OpenEpisode,
    closed_reason,
    hash_key,
    new_episode_key,
    open_from_row,
    refused_key_reason,
)
from ajet_proxy.route_context import host_in_loop, host_of
from ajet_proxy.stats import (
    batch_shape,
    build_rollout_stat,
    episode_detail,
    experiment_status,
    mission_caps,
)
from ajet_store import BeginEpisode, EndEpisode, StoreWriteFailed
from ajet_store.batch_policy import mission_limit
from ajet_store.counters import NO_CALLS
from ajet_store.episodes import refuse_if_silent
from ajet_store.types import EpisodeRow

logger = logging.getLogger(__name__)


router = APIRouter(
    prefix="/swarm", tags=["control"], responses=CONTROL_ERRORS
)  # the swarm token is checked first, by `auth.py`


CLIENT_ID_MAX = 256
"""Characters of a client id the store keeps (its column's width)."""


def _client_id(request: Request) -> str:
    """The calling client's id (its header, else its address), refused when it would not fit the store."""
    given = request.headers.get(CLIENT_HEADER)
    if given and len(given) > CLIENT_ID_MAX:
        raise InvalidRequest(
            f"the {CLIENT_HEADER} header is {len(given)} characters; at most {CLIENT_ID_MAX} are kept",
            fields=[CLIENT_HEADER],
        )
    return given or f"anonymous@{request.client.host if request.client else '?'}"


def _ok(s: ExperimentHost) -> OkResponse:
    return OkResponse(state=s.refresh_experiment().state)


@router.get("/get_engine_status", response_model=ExperimentStatus)
def get_experiment_status(request: Request) -> ExperimentStatus:
    """State, step, policy version."""
    host = host_of(request)
    return experiment_status(host.refresh_experiment(), time.time(), host.store.trainer_timeout_s)


@router.post("/set_batch_mode", response_model=OkResponse)
def set_batch_mode(body: SetBatchModeRequest, request: Request) -> OkResponse:
    """Change the batch policy for the next step."""
    s = host_of(request)
    s.store.set_batch_mode(body.mode)
    return _ok(s)


@router.post("/begin_episode", response_model=BeginEpisodeResponse)
async def begin_episode(body: BeginEpisodeRequest, request: Request) -> BeginEpisodeResponse:
    """Open an episode and mint its key (only in ROLLING with an engine registered; 503 with Retry-After
    otherwise)."""
    s, client_id = await host_in_loop(request), _client_id(request)
    if s.experiment.boot_failed:  # waiting cannot help: say why at once
        raise BootFailed(
            f"the trainer failed to boot the synced job ({s.experiment.last_error}); fix the job, then start_engine"
        )
    if not s.router.engines:  # re-read first: an engine registered since the last poll is not refused
        await s.in_episode_thread(s.refresh_experiment)
        if not s.router.engines:
            # a stopped trainer's engine is gone too: say it is silent, which the SDK bounds (trainer_max_silence)
            refuse_if_silent(s.experiment, time.time(), s.store.trainer_timeout_s, also=" and no engine registered")
            raise NotReady(
                "no engine is registered (the trainer is starting, or down); retry",
                state=s.experiment.state.value,
            )
    if body.mission:
        await s.in_episode_thread(_admit_mission, s, body)  # may read the store: off the event loop
    key = new_episode_key()
    begin = BeginEpisode(
        _episode_uuid(client_id, body.request_id),
        hash_key(key),
        client_id,
        body.episode_type,
        body.discard_episode_timeout,
        body.mission,
        retryable=body.request_id is not None,
    )
    try:
        row = await s.lifecycle.apply(begin)
    except TrainerUnresponsive as exc:  # down, or alive and unable to write its heartbeat: the store says which
        await s.in_episode_thread(_blame_the_store, s, exc)
        raise
    s.open_episodes.add_row(row)
    if s.experiment.state != ExperimentState.ROLLING:  # the store said ROLLING; don't let the cache lag behind it
        await s.in_episode_thread(s.refresh_experiment)
    return BeginEpisodeResponse(
        episode_uuid=row.uuid,
        api_key=key,
        base_url=str(request.base_url).rstrip("/") + "/v1",
        model="policy",
        policy_version=row.policy_version_start,
    )


@router.post("/end_episode", response_model=EpisodeResult)
async def end_episode(body: EndEpisodeRequest, request: Request) -> EpisodeResult:
    """Record the reward. Answers only after it is committed, with every call of the episode."""
    s, client_id = await host_in_loop(request), _client_id(request)
    _check_reward(body.reward, s.experiment.job)
    if s.writer.pending(body.episode_uuid):  # its calls are usually committed already (before their answers)
        await asyncio.to_thread(s.writer.flush)  # not on the episode thread: other begins and ends go on meanwhile
    out = body.workflow_output
    meta = {"workflow": out.metadata, "log_metrics": out.log_metrics, "task": body.task.model_dump(mode="json")}
    row = await s.lifecycle.apply(
        EndEpisode(body.episode_uuid, client_id, body.task.task_id, body.reward, out.is_success, meta)
    )
    s.open_episodes.remove([row.uuid])
    return EpisodeResult(episode_uuid=row.uuid, status=row.status, reward=row.reward, warning=_never_trains(row))


def _episode_uuid(client_id: str, request_id: Optional[str]) -> str:
    """A new episode's uuid: random, or (for a begin the client may retry) the same for each retry of one begin of
    one client, so the store can answer a retry with the episode its lost answer named."""
    if request_id is None:
        return uuid.uuid4().hex
    return hashlib.sha256(f"{client_id}\0{request_id}".encode()).hexdigest()[:32]


def _open_episodes(s: ExperimentHost) -> list[OpenEpisode]:
    """The swarm's open episodes: this proxy's own, or with a shared store every proxy's (the store's rows), so
    the statistics and the monitor show one swarm whichever proxy they ask."""
    if not s.config.shared:
        return s.open_episodes.snapshot()
    return [open_from_row(row, row.calls_reserved) for row in s.store.episodes(status=EpisodeStatus.OPEN)]


def _blame_the_store(s: ExperimentHost, silent: TrainerUnresponsive) -> None:
    """Raise `StoreWriteFailed` (naming the store, not the trainer) when the store refuses a small write: then the
    trainer's heartbeat is old because it could not be written (a full disk), not because the trainer died."""
    try:
        s.store.probe_write()
    except StoreWriteFailed as exc:
        raise StoreWriteFailed(
            f"{exc.detail}; the trainer's heartbeat is {silent.silent_s:.0f}s old because the store takes no writes"
        ) from exc


def _admit_mission(s: ExperimentHost, body: BeginEpisodeRequest) -> None:
    """A capped mission with its share of the batch in flight (open, or waiting in the pool) waits for a step:
    503 with Retry-After, which `begin_episode` in the SDK waits out."""
    share = mission_caps(s.experiment).get(body.mission) if body.mission else None
    if share is None or body.episode_type != "train":
        return
    batch_size, num_repeat = batch_shape(s.experiment)
    limit = mission_limit(share, batch_size) * num_repeat
    in_flight = s.store.mission_in_flight(body.mission)
    if in_flight >= limit:
        raise NotReady(
            f"mission {body.mission!r} has its share of the batch in flight ({in_flight} episodes, "
            f"max_batch_share {share:g} of {batch_size} tasks x {num_repeat}); retry after the step",
            state=s.experiment.state.value,
        )


def _never_trains(row: EpisodeRow) -> Optional[str]:
    """The warning for an ended episode that will never train (its reward is kept), else None."""
    if row.untrainable_reason == NO_CALLS:
        return (
            f"episode {row.uuid} made no LLM calls through its key, so it will never train (its reward is "
            "kept); did the agent use the base_url and api_key from begin_episode?"
        )
    return None


def _check_reward(reward: float, job: Optional[AgentJetJob]) -> None:
    """A reward beyond the job's bound is refused before anything is written (an episode only ends under a synced
    job; the default job's bound stands in for none)."""
    bound = job.max_abs_reward if job is not None else AgentJetJob.model_fields["max_abs_reward"].default
    if abs(reward) > bound:
        raise InvalidRequest(
            f"workflow_output.reward: {reward!r} is beyond the job's bound |reward| <= {bound:g} (max_abs_reward)",
            fields=["workflow_output.reward"],
        )


@router.post("/abort_episode", response_model=EpisodeResult)
async def abort_episode(body: EpisodeUuidRequest, request: Request) -> EpisodeResult:
    """Discard an episode; harmless if it is already aborted or expired."""
    s = await host_in_loop(request)
    return await s.in_episode_thread(_abort_episode, s, body.episode_uuid, _client_id(request))


def _abort_episode(s: ExperimentHost, episode_uuid: str, client_id: str) -> EpisodeResult:
    row, _changed = s.store.abort_episode(episode_uuid, client_id)
    s.open_episodes.remove([row.uuid])
    return EpisodeResult(episode_uuid=row.uuid, status=row.status, reward=row.reward)


@router.post("/can_continue_episode", response_model=EpisodeContinuation)
def can_continue_episode(body: EpisodeUuidRequest, request: Request) -> EpisodeContinuation:
    """Whether the episode is still open, so a long agent can stop early once the server expired it."""
    s = host_of(request)
    if not s.config.shared and s.open_episodes.by_uuid(body.episode_uuid) is not None:  # shared: the store says
        return EpisodeContinuation(episode_uuid=body.episode_uuid, can_continue=True, status=EpisodeStatus.OPEN)
    try:
        row: Optional[EpisodeRow] = s.store.get_episode(body.episode_uuid)
    except EpisodeNotFound:
        row = None
    if row is not None and row.status == EpisodeStatus.OPEN:
        return EpisodeContinuation(episode_uuid=body.episode_uuid, can_continue=True, status=EpisodeStatus.OPEN)
    reason = (closed_reason(row) if row else None) or refused_key_reason(row)
    return EpisodeContinuation(
        episode_uuid=body.episode_uuid, can_continue=False, status=row.status if row else None, reason=reason
    )


@router.get("/get_rollout_stat", response_model=RolloutStat)
def get_rollout_stat(request: Request) -> RolloutStat:
    """Pool progress in all modes, open episodes, tasks, clients, totals and recent steps."""
    s = host_of(request)
    st = s.store
    return build_rollout_stat(
        s.refresh_experiment(),
        st.pool_episodes(),
        _open_episodes(s),
        {**st.totals(), "store_conflicts_retried": st.conflicts_retried},  # this proxy process's, since it started
        st.clients(),
        st.steps(last=50),
        time.time(),
        st.trainer_timeout_s,
        st.missions(),
        st.last_evaluation(),
    )


@router.post("/get_steps", response_model=StepsPage)
def get_steps(body: StepsRequest, request: Request) -> StepsPage:
    """A page of the step history, oldest first (the monitor's reward chart reads it incrementally)."""
    return StepsPage(steps=host_of(request).store.steps_after(body.after, body.limit))


@router.post("/get_episode", response_model=EpisodeDetail)
def get_episode(body: EpisodeUuidRequest, request: Request) -> EpisodeDetail:
    """One episode and its calls, for the monitor and for debugging."""
    s = host_of(request)
    s.writer.flush()
    return episode_detail(s.store.get_episode(body.episode_uuid), s.store.calls(body.episode_uuid))

"""`AsyncSwarmClient`: every `SwarmClient` method as a coroutine, for agents that run in an event loop (the Agents
SDK, LangGraph, AutoGen, pydantic-ai), where a blocking client would stall every other coroutine while it waits.
The bodies, answers and wait rules are `ajet.client_base`'s, as the sync client's; only the transport and the
sleeps are awaited. The transport is aiohttp's, under httpx's interface (`httpx_aiohttp`): a request costs the
client ~0.35 ms of CPU on it, ~1.8 ms on httpx's own asyncio stack and ~0.9 ms through the sync client in a thread
pool (`bench/async_transport.py`). `rollout_episode_async` runs one episode and `run_episodes_async` keeps N in flight
in one loop, retrying a failed episode as the seed's executors do when asked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

import httpx
from httpx_aiohttp import AiohttpTransport

from ajet.client_base import (
    POOL_LIMITS,
    BeginWait,
    Body,
    ClientSettings,
    StoreWait,
    TransportBackoff,
    error_from_response,
)
from ajet.errors import (
    AjetError,
    EpisodeConflict,
    NotReady,
    StoreUnavailable,
    SwarmConnectionError,
    SwarmError,
    SwarmTimeout,
)
from ajet.job import AgentJetJob
from ajet.kept_rewards import KeptEnd, outcome_of, report
from ajet.rescore_types import EpisodeSelection, RewardVersionInfo, RewardVersionList, UnscoredPage
from ajet.rescoring import RewardFunction, scores_request, version_request
from ajet.stat_types import EpisodeDetail, RolloutStat, StepInfo, StepsPage
from ajet.types import (
    BatchMode,
    EpisodeContinuation,
    EpisodeResult,
    ExperimentList,
    ExperimentState,
    ExperimentStatus,
    OkResponse,
    OpenaiBaseUrlAndApiKey,
    SwarmExperiment,
    Task,
    WorkflowOutput,
)
from ajet.utils.thread_executors import RETRY_BACKOFF_S

logger = logging.getLogger(__name__)

AsyncAgentFn = Callable[[Task, OpenaiBaseUrlAndApiKey], Awaitable[WorkflowOutput]]
"""An async agent: a task and its episode's credentials in, the workflow output (its reward) out."""


class AsyncSwarmClient(ClientSettings[httpx.AsyncClient]):
    """`SwarmClient`'s methods as coroutines. Safe to share between event loops and threads: each event loop
    that uses it gets its own connection pool (an `httpx.AsyncClient` over aiohttp, made on its first call there),
    since a pool's connections belong to the loop that opened them. Close with `aclose` or `async with` (in each
    loop that used it)."""

    def _start(self) -> None:
        self._pools: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pools_lock = threading.Lock()

    @property
    def _http(self) -> httpx.AsyncClient:
        """The running loop's pool (the lent `http_client`, when one was given)."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            pool = self._pools.get(loop)
            if pool is None:
                for old in [old for old in self._pools if old.is_closed()]:  # loops gone: their pools with them
                    del self._pools[old]
                pool = self._pools[loop] = httpx.AsyncClient(
                    base_url=self.server_url,
                    headers=self._headers,
                    timeout=self.timeout,
                    transport=AiohttpTransport(limits=POOL_LIMITS),
                )
        return pool

    async def aclose(self) -> None:
        """Close the running loop's connection pool (each other loop that used the client closes its own)."""
        if self._given is not None:
            await self._given.aclose()
            return
        with self._pools_lock:
            pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    async def __aenter__(self) -> "AsyncSwarmClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ transport
    async def _call(self, method: str, route: str, body: Body = None) -> Any:
        """One control call, retried while the server's store takes no writes (bounded by `store_max_wait`)."""
        wait = StoreWait(self.store_max_wait)
        while True:
            try:
                return await self._call_once(method, route, body)
            except StoreUnavailable as exc:
                await asyncio.sleep(wait.next(exc, f"{method} {route}"))

    async def _call_once(self, method: str, route: str, body: Body = None) -> Any:
        backoff = TransportBackoff(f"{self.server_url}/swarm/{route}", self.max_retries)
        while True:
            try:
                headers = self._experiment_headers()
                resp = await self._http.request(method, f"/swarm/{route}", json=body, headers=headers)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                await asyncio.sleep(backoff.next(exc))
                continue
            if resp.status_code >= 400:
                raise error_from_response(resp)
            return resp.json()

    # ------------------------------------------------------------------ engine
    async def sync_train_config(self, job: AgentJetJob) -> ExperimentState:
        """Send the job to the proxy (only while OFFLINE); its experiment is this client's from then on (a new name
        beside a running experiment: an experiment of its own, docs/experiments.md)."""
        state = self._synced(await self._call("POST", "sync_train_config", {"job": job.to_wire()}))
        self._name_experiment(job)
        return state

    async def start_engine(self) -> ExperimentState:
        """Ask the trainer to boot the synced job (OFFLINE -> BOOTING)."""
        return OkResponse.model_validate(await self._call("POST", "start_engine")).state

    async def stop_swarm(self) -> list[SwarmExperiment]:
        """Stop every experiment of the swarm (each to OFFLINE, its open episodes aborted); returns them after."""
        return ExperimentList.model_validate(await self._call("POST", "stop_swarm")).experiments

    async def list_experiments(self) -> list[SwarmExperiment]:
        """Every experiment of the swarm with its state: the default, then the others by name."""
        return ExperimentList.model_validate(await self._call("GET", "list_experiments")).experiments

    async def stop_engine(self) -> ExperimentState:
        """Return the engine to OFFLINE from any state; open episodes are aborted."""
        return OkResponse.model_validate(await self._call("POST", "stop_engine")).state

    async def auto_sync_train_config_and_start_engine(
        self, job: AgentJetJob, force_restart: bool = False
    ) -> ExperimentState:
        """Sync and start the job's experiment if OFFLINE (a new name beside a running experiment: an experiment of
        its own); join it if it runs this job (or restart it with `force_restart`); `JobConflict` (409, naming the
        fields) when it runs another job, or when the job cannot run beside the swarm's experiments."""
        body = {"job": job.to_wire(), "force_restart": force_restart}
        answer = await self._call("POST", "auto_sync_train_config_and_start_engine", body)
        state = self._synced(answer)
        self._name_experiment(job)
        if self.verbose:
            logger.info("engine %s at %s", state.value, self.server_url)
        return state

    async def get_engine_status(self) -> ExperimentStatus:
        """The experiment's state, step and policy version."""
        return self._status(await self._call("GET", "get_engine_status"))

    async def set_batch_mode(self, mode: BatchMode | str) -> ExperimentState:
        """Change the batch policy; it applies to the next training step."""
        return OkResponse.model_validate(
            await self._call("POST", "set_batch_mode", {"mode": BatchMode(mode).value})
        ).state

    # ------------------------------------------------------------------ episodes
    async def begin_episode(
        self, discard_episode_timeout: float = 240, episode_type: str = "train", mission: Optional[str] = None
    ) -> tuple[str, OpenaiBaseUrlAndApiKey]:
        """Open an episode, waiting (without blocking the loop) as `SwarmClient.begin_episode` does."""
        body = self._begin_body(discard_episode_timeout, episode_type, mission)
        await self.resend_kept_rewards()
        wait = BeginWait(self.begin_episode_max_wait, self.trainer_max_silence)
        while True:
            try:
                return self._credentials(await self._call("POST", "begin_episode", body))
            except NotReady as exc:
                await asyncio.sleep(wait.next(exc))

    async def end_episode(self, task: Task, episode_uuid: str, workflow_output: WorkflowOutput) -> EpisodeResult:
        """Record the reward as `SwarmClient.end_episode` does (kept and sent again when the swarm cannot take it)."""
        body = self._end_body(task, episode_uuid, workflow_output)
        await self.resend_kept_rewards()
        try:
            return self._ended(await self._call("POST", "end_episode", body))
        except (StoreUnavailable, SwarmConnectionError):
            self._keep_end(body)
            raise

    async def resend_kept_rewards(self) -> int:
        """Send again the `end_episode` requests kept for this swarm, as `SwarmClient.resend_kept_rewards`."""
        pending, done = self._kept.pending(), {}
        for end in pending:
            exc: Optional[AjetError] = None
            try:
                await self._send_kept(end)
            except (SwarmError, SwarmConnectionError) as e:
                exc = e
            how = outcome_of(exc)
            report(end, how, exc)
            if how == "later":
                break
            done[end.episode_uuid] = how
        self._kept.settle(done)
        return len(pending) - len(done)

    async def _send_kept(self, end: KeptEnd) -> None:
        try:
            headers = self._kept_headers(end)
            resp = await self._http.request("POST", "/swarm/end_episode", json=end.body, headers=headers)
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise SwarmConnectionError(f"{self.server_url}/swarm/end_episode: {exc!r}") from exc
        if resp.status_code >= 400:
            raise error_from_response(resp)

    async def abort_episode(
        self,
        task_or_uuid: Union[Task, str],
        episode_uuid: Optional[str] = None,
        workflow_output: Optional[WorkflowOutput] = None,
    ) -> EpisodeResult:
        """Discard the episode (`(episode_uuid)`, or the seed's `(task, episode_uuid, workflow_output)`)."""
        uuid = self._abort_uuid(task_or_uuid, episode_uuid, workflow_output)
        return EpisodeResult.model_validate(await self._call("POST", "abort_episode", {"episode_uuid": uuid}))

    async def can_continue_episode(self, episode_uuid: str) -> bool:
        """Whether the episode is still open (the reason is logged when it cannot go on)."""
        answer = await self._call("POST", "can_continue_episode", {"episode_uuid": episode_uuid})
        return self._continues(episode_uuid, EpisodeContinuation.model_validate(answer))

    # ------------------------------------------------------------------ stats
    async def get_rollout_stat(self) -> RolloutStat:
        """Pool progress, open episodes, tasks, clients and recent steps."""
        return RolloutStat.model_validate(await self._call("GET", "get_rollout_stat"))

    async def get_steps(self, after: int = 0, limit: int = 1000) -> list[StepInfo]:
        """Recorded training steps newer than `after`, oldest first (at most `limit`)."""
        page = StepsPage.model_validate(await self._call("POST", "get_steps", {"after": after, "limit": limit}))
        return page.steps

    async def get_episode(self, episode_uuid: str) -> EpisodeDetail:
        """One episode with every LLM call it made."""
        return EpisodeDetail.model_validate(await self._call("POST", "get_episode", {"episode_uuid": episode_uuid}))

    async def get_reward_versions(self) -> list[RewardVersionInfo]:
        """The experiment's reward versions (`rescore`), oldest first."""
        return RewardVersionList.model_validate(await self._call("GET", "reward_versions")).versions

    async def rescore(
        self, reward: RewardFunction, selection: Optional[EpisodeSelection] = None, page: int = 64
    ) -> RewardVersionInfo:
        """Score the experiment's stored episodes again with `reward` (here, in this process), as a new reward
        version beside the clients' rewards, which stay; no agent runs. The same function (by name and source) on
        the same selection is the same version: a re-run resumes where one stopped and scores nothing twice. An
        episode the function raises on is stored with the error. Returns the finished version."""
        body = version_request(reward, selection).model_dump(mode="json")
        version = RewardVersionInfo.model_validate(await self._call("POST", "reward_version", body)).version
        while True:
            asked = {"version": version, "limit": page}
            todo = UnscoredPage.model_validate(await self._call("POST", "unscored_episodes", asked)).episodes
            if not todo:
                break
            await self._call("POST", "write_scores", scores_request(version, reward, todo).model_dump(mode="json"))
        return RewardVersionInfo.model_validate(await self._call("POST", "finish_reward_version", {"version": version}))


async def rollout_episode_async(
    client: AsyncSwarmClient, task: Task, agent: AsyncAgentFn, episode_type: str = "train", timeout: float = 240
) -> float:
    """One episode in the loop: begin, await the agent, end (abort if it raises: a crashed agent is never
    scored); returns the recorded reward."""
    uuid, creds = await client.begin_episode(discard_episode_timeout=timeout, episode_type=episode_type)
    try:
        out = await agent(task, creds)
    except Exception:
        await client.abort_episode(uuid)
        raise
    ended = await client.end_episode(task, uuid, out)
    if ended.reward is None:
        raise EpisodeConflict(f"episode {uuid} ended without a recorded reward", status=200)
    return ended.reward


async def run_episodes_async(
    client: AsyncSwarmClient,
    tasks: Sequence[Task],
    agent: AsyncAgentFn,
    in_flight: int = 32,
    episode_type: str = "train",
    timeout: float = 240,
    max_retries: int = 0,
) -> list[Union[float, BaseException]]:
    """Every task's episode, at most `in_flight` at once in this loop; each task's reward, or the exception its
    last try raised (one failing agent does not cancel the others). A failed episode (aborted, never scored) is
    tried again in a new episode up to `max_retries` times, each failure logged, after the pause the seed's
    executors take (`ajet.utils.thread_executors.RETRY_BACKOFF_S`)."""
    gate = asyncio.Semaphore(in_flight)

    async def one(task: Task) -> float:
        failures = 0
        while True:
            try:
                async with gate:
                    return await rollout_episode_async(client, task, agent, episode_type, timeout)
            except Exception as exc:
                if failures == max_retries:
                    raise
                failures += 1
                logger.warning("task %s failed (%r); retry %d/%d", task.task_id, exc, failures, max_retries)
                await asyncio.sleep(min(RETRY_BACKOFF_S[1], RETRY_BACKOFF_S[0] * 2 ** (failures - 1)))

    return list(await asyncio.gather(*(one(t) for t in tasks), return_exceptions=True))


async def wait_for_step_async(
    client: AsyncSwarmClient, after: int, timeout: float = 3600.0, poll: float = 0.02
) -> StepInfo:
    """The first training step newer than `after` (`training_loop.wait_for_step` in the loop: it polls
    `get_steps` every `poll` seconds, each poll's sleep yielding to the loop's other coroutines)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = await client.get_steps(after=after, limit=1)
        if steps:
            return steps[0]
        await asyncio.sleep(poll)
    raise SwarmTimeout(f"no training step after {after} within {timeout}s")

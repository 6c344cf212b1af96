"""`SwarmClient`: the control-API client. Thread-safe; it holds no episode state.

Each public method maps to the proxy route of the same name under `/swarm/`. Transient network
errors are retried with bounded backoff; `begin_episode` also waits (bounded) while the engine is not
ROLLING. Every other failure raises a typed exception from `ajet.errors` with the server's reason.
The request bodies, answers and wait rules are `ajet.client_base`'s, shared with `AsyncSwarmClient`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Optional, TextIO, Union

import httpx

from ajet.client_base import (
    POOL_LIMITS,
    BeginWait,
    Body,
    ClientSettings,
    StoreWait,
    TransportBackoff,
    error_from_response,
)
from ajet.errors import AjetError, NotReady, StoreUnavailable, SwarmConnectionError, SwarmError
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

logger = logging.getLogger(__name__)


class SwarmClient(ClientSettings[httpx.Client]):
    """Talks to one `ajet-proxy` (one model). Use one per model in multi-model workflows; in an event loop, use
    `AsyncSwarmClient`."""

    def _start(self) -> None:
        self._http = self._given or httpx.Client(
            base_url=self.server_url, headers=self._headers, timeout=self.timeout, limits=POOL_LIMITS
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "SwarmClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, route: str, body: Body = None) -> Any:
        """One control call, retried while the server's store takes no writes (bounded by `store_max_wait`)."""
        wait = StoreWait(self.store_max_wait)
        while True:
            try:
                return self._call_once(method, route, body)
            except StoreUnavailable as exc:
                time.sleep(wait.next(exc, f"{method} {route}"))

    def _call_once(self, method: str, route: str, body: Body = None) -> Any:
        """One control call with bounded retries on transport errors; raises typed errors."""
        backoff = TransportBackoff(f"{self.server_url}/swarm/{route}", self.max_retries)
        while True:
            try:
                resp = self._http.request(method, f"/swarm/{route}", json=body, headers=self._experiment_headers())
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                time.sleep(backoff.next(exc))
                continue
            if resp.status_code >= 400:
                raise error_from_response(resp)
            return resp.json()

    # ------------------------------------------------------------------ engine
    def sync_train_config(self, job: AgentJetJob) -> ExperimentState:
        """Send the job to the proxy (only while OFFLINE); its experiment is this client's from then on (a new name
        beside a running experiment: an experiment of its own, docs/experiments.md)."""
        state = self._synced(self._call("POST", "sync_train_config", {"job": job.to_wire()}))
        self._name_experiment(job)
        return state

    def start_engine(self) -> ExperimentState:
        """Ask the trainer to boot the synced job (OFFLINE -> BOOTING)."""
        return OkResponse.model_validate(self._call("POST", "start_engine")).state

    def stop_engine(self) -> ExperimentState:
        """Return the engine to OFFLINE from any state; open episodes are aborted."""
        return OkResponse.model_validate(self._call("POST", "stop_engine")).state

    def stop_swarm(self) -> list[SwarmExperiment]:
        """Stop every experiment of the swarm (each to OFFLINE, its open episodes aborted); returns them after."""
        return ExperimentList.model_validate(self._call("POST", "stop_swarm")).experiments

    def list_experiments(self) -> list[SwarmExperiment]:
        """Every experiment of the swarm with its state: the default, then the others by name."""
        return ExperimentList.model_validate(self._call("GET", "list_experiments")).experiments

    def auto_sync_train_config_and_start_engine(self, job: AgentJetJob, force_restart: bool = False) -> ExperimentState:
        """Sync and start the job's experiment if OFFLINE (a new name beside a running experiment: an experiment of
        its own); join it if it runs this job (or restart it with `force_restart`); `JobConflict` (409, naming the
        fields) when it runs another job, or when the job cannot run beside the swarm's experiments."""
        body = {"job": job.to_wire(), "force_restart": force_restart}
        state = self._synced(self._call("POST", "auto_sync_train_config_and_start_engine", body))
        self._name_experiment(job)
        if self.verbose:
            logger.info("engine %s at %s", state.value, self.server_url)
        return state

    def get_engine_status(self) -> ExperimentStatus:
        """The experiment's state, step and policy version."""
        return self._status(self._call("GET", "get_engine_status"))

    def set_batch_mode(self, mode: BatchMode | str) -> ExperimentState:
        """Change the batch policy; it applies to the next training step."""
        body = {"mode": BatchMode(mode).value}
        return OkResponse.model_validate(self._call("POST", "set_batch_mode", body)).state

    # ------------------------------------------------------------------ episodes
    def begin_episode(
        self, discard_episode_timeout: float = 240, episode_type: str = "train", mission: Optional[str] = None
    ) -> tuple[str, OpenaiBaseUrlAndApiKey]:
        """Open an episode; waits with backoff (bounded by `begin_episode_max_wait`) while not ROLLING, and at
        most `trainer_max_silence` seconds for a trainer that has stopped beating.

        `mission` (default: the client's) labels the episode's dataset + reward in the statistics.
        """
        body = self._begin_body(discard_episode_timeout, episode_type, mission)
        self.resend_kept_rewards()
        wait = BeginWait(self.begin_episode_max_wait, self.trainer_max_silence)
        while True:
            try:
                return self._credentials(self._call("POST", "begin_episode", body))
            except NotReady as exc:
                time.sleep(wait.next(exc))

    def end_episode(self, task: Task, episode_uuid: str, workflow_output: WorkflowOutput) -> EpisodeResult:
        """Record the reward. Answers only after the reward is committed; ending twice is harmless. When the store
        stays unavailable past `store_max_wait`, or the swarm cannot be reached, the request is kept on this
        machine and sent again later (`ajet.kept_rewards`), then the error is raised."""
        body = self._end_body(task, episode_uuid, workflow_output)
        self.resend_kept_rewards()
        try:
            return self._ended(self._call("POST", "end_episode", body))
        except (StoreUnavailable, SwarmConnectionError):
            self._keep_end(body)
            raise

    def resend_kept_rewards(self) -> int:
        """Send again the `end_episode` requests kept for this swarm (by any client of this machine); returns how
        many are still kept (the swarm or its store still out). `begin_episode` and `end_episode` call it."""
        pending, done = self._kept.pending(), {}
        for end in pending:
            exc: Optional[AjetError] = None
            try:
                self._send_kept(end)
            except (SwarmError, SwarmConnectionError) as e:
                exc = e
            how = outcome_of(exc)
            report(end, how, exc)
            if how == "later":
                break
            done[end.episode_uuid] = how
        self._kept.settle(done)
        return len(pending) - len(done)

    def _send_kept(self, end: KeptEnd) -> None:
        """One try of a kept request (no retries: the next begin or end tries again)."""
        try:
            resp = self._http.request("POST", "/swarm/end_episode", json=end.body, headers=self._kept_headers(end))
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise SwarmConnectionError(f"{self.server_url}/swarm/end_episode: {exc!r}") from exc
        if resp.status_code >= 400:
            raise error_from_response(resp)

    def abort_episode(
        self,
        task_or_uuid: Union[Task, str],
        episode_uuid: Optional[str] = None,
        workflow_output: Optional[WorkflowOutput] = None,
    ) -> EpisodeResult:
        """Discard the episode; its key stops working. Aborting twice is harmless.

        Called as `abort_episode(episode_uuid)`, or as the seed says ("just replace `end_episode` with
        `abort_episode`") `abort_episode(task, episode_uuid, workflow_output)`: the task and output are
        then not recorded, since an aborted episode is never trained."""
        uuid = self._abort_uuid(task_or_uuid, episode_uuid, workflow_output)
        return EpisodeResult.model_validate(self._call("POST", "abort_episode", {"episode_uuid": uuid}))

    def can_continue_episode(self, episode_uuid: str) -> bool:
        """Whether the episode is still open: a long agent can check it and stop early once the server has
        expired (or anyone has ended or aborted) the episode. The reason is logged when it cannot."""
        answer = self._call("POST", "can_continue_episode", {"episode_uuid": episode_uuid})
        return self._continues(episode_uuid, EpisodeContinuation.model_validate(answer))

    # ------------------------------------------------------------------ stats
    def get_rollout_stat(self) -> RolloutStat:
        """Pool progress, open episodes, tasks, clients and recent steps."""
        return RolloutStat.model_validate(self._call("GET", "get_rollout_stat"))

    def get_steps(self, after: int = 0, limit: int = 1000) -> list[StepInfo]:
        """Recorded training steps newer than `after`, oldest first (at most `limit`)."""
        page = StepsPage.model_validate(self._call("POST", "get_steps", {"after": after, "limit": limit}))
        return page.steps

    def get_episode(self, episode_uuid: str) -> EpisodeDetail:
        """One episode with every LLM call it made (messages, token counts, finish reasons, latency)."""
        return EpisodeDetail.model_validate(self._call("POST", "get_episode", {"episode_uuid": episode_uuid}))

    def get_reward_versions(self) -> list[RewardVersionInfo]:
        """The experiment's reward versions (`rescore`), oldest first."""
        return RewardVersionList.model_validate(self._call("GET", "reward_versions")).versions

    def rescore(
        self, reward: RewardFunction, selection: Optional[EpisodeSelection] = None, page: int = 64
    ) -> RewardVersionInfo:
        """Score the experiment's stored episodes again with `reward` (here, in this process), as a new reward
        version beside the clients' rewards, which stay; no agent runs. The same function (by name and source) on
        the same selection is the same version: a re-run resumes where one stopped and scores nothing twice. An
        episode the function raises on is stored with the error. Returns the finished version."""
        body = version_request(reward, selection).model_dump(mode="json")
        version = RewardVersionInfo.model_validate(self._call("POST", "reward_version", body)).version
        while True:
            asked = {"version": version, "limit": page}
            todo = UnscoredPage.model_validate(self._call("POST", "unscored_episodes", asked)).episodes
            if not todo:
                break
            self._call("POST", "write_scores", scores_request(version, reward, todo).model_dump(mode="json"))
        return RewardVersionInfo.model_validate(self._call("POST", "finish_reward_version", {"version": version}))

    def print_rollout_stat(self, file: Optional[TextIO] = None) -> None:
        """Print a compact pool summary (one screen)."""
        from ajet.rollout_summary import format_rollout_stat

        print(format_rollout_stat(self.get_rollout_stat()), file=file or sys.stdout)

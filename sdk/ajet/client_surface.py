"""What a client can ask of the swarm, written once: every control-API method as an operation (`ajet.client_steps`).

`SwarmClient` offers each of them blocking, `AsyncSwarmClient` as a coroutine; each maps to the proxy route of the
same name under `/swarm/`. Transient network errors are retried with bounded backoff; `begin_episode` also waits
(bounded) while the engine is not ROLLING. Every other failure raises a typed exception from `ajet.errors` with the
server's reason. The request bodies, answers and wait rules are `ajet.client_base`'s.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Optional, Sequence, TextIO, Union

from ajet.client_base import (
    BeginWait,
    Body,
    ClientSettings,
    H,
    StoreWait,
    TransportBackoff,
    error_from_response,
    wire_body,
)
from ajet.client_steps import TRANSPORT_ERRORS, Op, Sleep, json_request, operation
from ajet.errors import AjetError, NotReady, StoreUnavailable, SwarmConnectionError, SwarmError
from ajet.evaluation_types import EvaluationInfo, EvaluationList, EvaluationRequest, EvaluationsQuery
from ajet.job import AgentJetJob
from ajet.kept_rewards import KeptEnd, Outcome, outcome_of, report
from ajet.rescore_types import EpisodeSelection, RewardVersionInfo, RewardVersionList, UnscoredPage
from ajet.rescoring import RewardFunction, scores_request, version_request
from ajet.stat_types import EpisodeDetail, RolloutStat, StepInfo, StepsPage
from ajet.types import (
    AutoSyncRequest,
    BatchMode,
    EpisodeContinuation,
    EpisodeResult,
    ExperimentList,
    ExperimentState,
    ExperimentStatus,
    OkResponse,
    OpenaiBaseUrlAndApiKey,
    SwarmExperiment,
    SyncTrainConfigRequest,
    Task,
    WorkflowOutput,
)

logger = logging.getLogger(__name__)


class SwarmSurface(ClientSettings[H]):
    """Every control-API method of a client, as operations; a runner (`SyncRunner`, `AsyncRunner`) runs them."""

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, route: str, body: Body = None) -> Op[Any]:
        """One control call, retried while the server's store takes no writes (bounded by `store_max_wait`)."""
        wait = StoreWait(self.store_max_wait)
        while True:
            try:
                return (yield from self._call_once(method, route, body))
            except StoreUnavailable as exc:
                yield Sleep(wait.next(exc, f"{method} {route}"))

    def _call_once(self, method: str, route: str, body: Body = None) -> Op[Any]:
        """One control call with bounded retries on transport errors; raises typed errors."""
        backoff = TransportBackoff(f"{self.server_url}/swarm/{route}", self.max_retries)
        while True:
            try:
                resp = yield json_request(method, f"/swarm/{route}", body, self._experiment_headers())
            except TRANSPORT_ERRORS as exc:
                yield Sleep(backoff.next(exc))
                continue
            if resp.status_code >= 400:
                raise error_from_response(resp)
            return resp.json()

    # ------------------------------------------------------------------ engine
    @operation
    def sync_train_config(self, job: AgentJetJob) -> Op[ExperimentState]:
        """Send the job to the proxy (only while OFFLINE); its experiment is this client's from then on (a new name
        beside a running experiment: an experiment of its own, docs/experiments.md)."""
        body = wire_body(SyncTrainConfigRequest, job=job.model_dump())
        state = self._synced((yield from self._call("POST", "sync_train_config", body)))
        self._name_experiment(job)
        return state

    @operation
    def start_engine(self) -> Op[ExperimentState]:
        """Ask the trainer to boot the synced job (OFFLINE -> BOOTING)."""
        return OkResponse.model_validate((yield from self._call("POST", "start_engine"))).state

    @operation
    def stop_engine(self) -> Op[ExperimentState]:
        """Return the engine to OFFLINE from any state; open episodes are aborted."""
        return OkResponse.model_validate((yield from self._call("POST", "stop_engine"))).state

    @operation
    def stop_swarm(self) -> Op[list[SwarmExperiment]]:
        """Stop every experiment of the swarm (each to OFFLINE, its open episodes aborted); returns them after."""
        return ExperimentList.model_validate((yield from self._call("POST", "stop_swarm"))).experiments

    @operation
    def list_experiments(self) -> Op[list[SwarmExperiment]]:
        """Every experiment of the swarm with its state: the default, then the others by name."""
        return ExperimentList.model_validate((yield from self._call("GET", "list_experiments"))).experiments

    @operation
    def auto_sync_train_config_and_start_engine(
        self, job: AgentJetJob, force_restart: bool = False
    ) -> Op[ExperimentState]:
        """Sync and start the job's experiment if OFFLINE (a new name beside a running experiment: an experiment of
        its own); join it if it runs this job (or restart it with `force_restart`); `JobConflict` (409, naming the
        fields) when it runs another job, or when the job cannot run beside the swarm's experiments."""
        body = wire_body(AutoSyncRequest, job=job.model_dump(), force_restart=force_restart)
        state = self._synced((yield from self._call("POST", "auto_sync_train_config_and_start_engine", body)))
        self._name_experiment(job)
        if self.verbose:
            logger.info("engine %s at %s", state.value, self.server_url)
        return state

    @operation
    def get_engine_status(self) -> Op[ExperimentStatus]:
        """The experiment's state, step and policy version."""
        return self._status((yield from self._call("GET", "get_engine_status")))

    @operation
    def set_batch_mode(self, mode: BatchMode | str) -> Op[ExperimentState]:
        """Change the batch policy; it applies to the next training step."""
        body = {"mode": BatchMode(mode).value}
        return OkResponse.model_validate((yield from self._call("POST", "set_batch_mode", body))).state

    # ------------------------------------------------------------------ episodes
    @operation
    def begin_episode(
        self, discard_episode_timeout: float = 240, episode_type: str = "train", mission: Optional[str] = None
    ) -> Op[tuple[str, OpenaiBaseUrlAndApiKey]]:
        """Open an episode; waits with backoff (bounded by `begin_episode_max_wait`) while not ROLLING, and at
        most the swarm's `trainer_timeout_s` (and `trainer_max_silence` more, when set) for a trainer that has stopped
        beating.

        `mission` (default: the client's) labels the episode's dataset + reward in the statistics.
        """
        body = self._begin_body(discard_episode_timeout, episode_type, mission)
        yield from self._resend_kept()
        wait = BeginWait(self.begin_episode_max_wait, self.trainer_max_silence)
        while True:
            try:
                return self._credentials((yield from self._call("POST", "begin_episode", body)))
            except NotReady as exc:
                yield Sleep(wait.next(exc))

    @operation
    def end_episode(self, task: Task, episode_uuid: str, workflow_output: WorkflowOutput) -> Op[EpisodeResult]:
        """Record the reward. Answers only after the reward is committed; ending twice is harmless. When the store
        stays unavailable past `store_max_wait`, or the swarm cannot be reached, the request is kept on this
        machine and sent again later (`ajet.kept_rewards`), then the error is raised."""
        body = self._end_body(task, episode_uuid, workflow_output)
        yield from self._resend_kept()
        try:
            return self._ended((yield from self._call("POST", "end_episode", body)))
        except (StoreUnavailable, SwarmConnectionError):
            self._keep_end(body)
            raise

    @operation
    def resend_kept_rewards(self) -> Op[int]:
        """Send again the `end_episode` requests kept for this swarm (by any client of this machine); returns how
        many are still kept (the swarm or its store still out). `begin_episode` and `end_episode` call it."""
        return (yield from self._resend_kept())

    def _resend_kept(self) -> Op[int]:
        pending, done = self._kept.pending(), dict[str, Outcome]()
        for end in pending:
            exc: Optional[AjetError] = None
            try:
                yield from self._send_kept(end)
            except (SwarmError, SwarmConnectionError) as e:
                exc = e
            how = outcome_of(exc)
            report(end, how, exc)
            if how == "later":
                break
            done[end.episode_uuid] = how
        self._kept.settle(done)
        return len(pending) - len(done)

    def _send_kept(self, end: KeptEnd) -> Op[None]:
        """One try of a kept request (no retries: the next begin or end tries again)."""
        try:
            resp = yield json_request("POST", "/swarm/end_episode", end.body, self._kept_headers(end))
        except TRANSPORT_ERRORS as exc:
            raise SwarmConnectionError(f"{self.server_url}/swarm/end_episode: {exc!r}") from exc
        if resp.status_code >= 400:
            raise error_from_response(resp)

    @operation
    def abort_episode(
        self,
        task_or_uuid: Union[Task, str],
        episode_uuid: Optional[str] = None,
        workflow_output: Optional[WorkflowOutput] = None,
    ) -> Op[EpisodeResult]:
        """Discard the episode; its key stops working. Aborting twice is harmless.

        Called as `abort_episode(episode_uuid)`, or as the seed says ("just replace `end_episode` with
        `abort_episode`") `abort_episode(task, episode_uuid, workflow_output)`: the task and output are
        then not recorded, since an aborted episode is never trained."""
        uuid = self._abort_uuid(task_or_uuid, episode_uuid, workflow_output)
        return EpisodeResult.model_validate((yield from self._call("POST", "abort_episode", {"episode_uuid": uuid})))

    @operation
    def can_continue_episode(self, episode_uuid: str) -> Op[bool]:
        """Whether the episode is still open: a long agent can check it and stop early once the server has
        expired (or anyone has ended or aborted) the episode. The reason is logged when it cannot."""
        answer = yield from self._call("POST", "can_continue_episode", {"episode_uuid": episode_uuid})
        return self._continues(episode_uuid, EpisodeContinuation.model_validate(answer))

    # ------------------------------------------------------------------ stats
    @operation
    def get_rollout_stat(self) -> Op[RolloutStat]:
        """Pool progress, open episodes, tasks, clients and recent steps."""
        return RolloutStat.model_validate((yield from self._call("GET", "get_rollout_stat")))

    @operation
    def print_rollout_stat(self, file: Optional[TextIO] = None) -> Op[None]:
        """Print a compact pool summary (one screen)."""
        from ajet.rollout_summary import format_rollout_stat

        stat = RolloutStat.model_validate((yield from self._call("GET", "get_rollout_stat")))
        print(format_rollout_stat(stat), file=file or sys.stdout)

    @operation
    def get_steps(self, after: int = 0, limit: int = 1000) -> Op[list[StepInfo]]:
        """Recorded training steps newer than `after`, oldest first (at most `limit`)."""
        page = yield from self._call("POST", "get_steps", {"after": after, "limit": limit})
        return StepsPage.model_validate(page).steps

    @operation
    def get_episode(self, episode_uuid: str) -> Op[EpisodeDetail]:
        """One episode with every LLM call it made (messages, token counts, finish reasons, latency)."""
        answer = yield from self._call("POST", "get_episode", {"episode_uuid": episode_uuid})
        return EpisodeDetail.model_validate(answer)

    @operation
    def get_reward_versions(self) -> Op[list[RewardVersionInfo]]:
        """The experiment's reward versions (`rescore`), oldest first."""
        return RewardVersionList.model_validate((yield from self._call("GET", "reward_versions"))).versions

    @operation
    def rescore(
        self, reward: RewardFunction, selection: Optional[EpisodeSelection] = None, page: int = 64
    ) -> Op[RewardVersionInfo]:
        """Score the experiment's stored episodes again with `reward` (here, in this process), as a new reward
        version beside the clients' rewards, which stay; no agent runs. The same function (by name and source) on
        the same selection is the same version: a re-run resumes where one stopped and scores nothing twice. An
        episode the function raises on is stored with the error. Returns the finished version."""
        body = version_request(reward, selection).model_dump(mode="json")
        version = RewardVersionInfo.model_validate((yield from self._call("POST", "reward_version", body))).version
        while True:
            asked = {"version": version, "limit": page}
            todo = UnscoredPage.model_validate((yield from self._call("POST", "unscored_episodes", asked))).episodes
            if not todo:
                break
            scores = scores_request(version, reward, todo).model_dump(mode="json")
            yield from self._call("POST", "write_scores", scores)
        finished = yield from self._call("POST", "finish_reward_version", {"version": version})
        return RewardVersionInfo.model_validate(finished)

    # ------------------------------------------------------------------ evaluations
    @operation
    def record_evaluation(
        self, name: str, episode_uuids: Sequence[str], k: int = 1, pass_reward: float = 1.0
    ) -> Op[EvaluationInfo]:
        """Store an evaluation of task set `name` from its ended eval episodes (`ajet.evaluation` runs them): the
        proxy computes its mean reward and pass@k and the policy versions that served it."""
        body = wire_body(EvaluationRequest, name=name, k=k, episode_uuids=list(episode_uuids), pass_reward=pass_reward)
        return EvaluationInfo.model_validate((yield from self._call("POST", "record_evaluation", body)))

    @operation
    def get_evaluations(self, name: Optional[str] = None) -> Op[list[EvaluationInfo]]:
        """The experiment's evaluations (of task set `name` alone, when given), oldest first."""
        body = wire_body(EvaluationsQuery, name=name)
        return EvaluationList.model_validate((yield from self._call("POST", "get_evaluations", body))).evaluations

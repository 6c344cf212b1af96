"""`SwarmClient`: the control-API client. Thread-safe; it holds no episode state.

Each public method maps to the proxy route of the same name under `/swarm/`. Transient network
errors are retried with bounded backoff; `begin_episode` also waits (bounded) while the engine is not
ROLLING. Every other failure raises a typed exception from `ajet.errors` with the server's reason.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import sys
import time
import uuid
from typing import Any, Optional, TextIO, Union

import httpx

from ajet.errors import (
    EngineNotReady,
    ServerStoreUnavailable,
    SwarmConnectionError,
    SwarmTimeout,
    TrainerUnresponsive,
    error_for,
)
from ajet.job import AgentJetJob
from ajet.protocol import CLIENT_HEADER
from ajet.stat_types import EpisodeDetail, RolloutStat, StepInfo, StepsPage
from ajet.types import (
    BatchMode,
    BeginEpisodeResponse,
    EngineState,
    EngineStatus,
    EpisodeContinuation,
    EpisodeResult,
    OkResponse,
    OpenaiBaseUrlAndApiKey,
    Task,
    WorkflowOutput,
)

logger = logging.getLogger(__name__)


class SwarmClient:
    """Talks to one `ajet-proxy` (one model). Use one per model in multi-model workflows."""

    def __init__(
        self,
        server_url: str,
        *,
        swarm_token: Optional[str] = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        begin_episode_max_wait: float = 3600.0,
        trainer_max_silence: float = 120.0,
        store_max_wait: float = 60.0,
        client_id: Optional[str] = None,
        mission: Optional[str] = None,
        verbose: bool = True,
        http_client: Optional[httpx.Client] = None,
    ):
        self.server_url = server_url.rstrip("/")
        self.swarm_token = swarm_token if swarm_token is not None else os.environ.get("AJET_SWARM_TOKEN")
        self.max_retries = max_retries
        self.begin_episode_max_wait = begin_episode_max_wait
        self.trainer_max_silence = trainer_max_silence
        """Seconds `begin_episode` waits for a trainer that writes no heartbeat (`TrainerUnresponsive`) before it
        raises; a restarting trainer is back well within it."""
        self.store_max_wait = store_max_wait
        """Seconds a call is retried while the server's store takes no writes (`ServerStoreUnavailable`: a full
        disk, a database down); nothing of a refused call was committed, so the retry is safe."""
        self.client_id = client_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.mission = mission
        self._warned_untrainable = False
        self.verbose = verbose
        headers = {CLIENT_HEADER: self.client_id}
        if self.swarm_token:
            headers["Authorization"] = f"Bearer {self.swarm_token}"
        if http_client is not None:  # its base URL and transport (an app served in this process: `TestClient`)
            http_client.headers.update(headers)
            self._http = http_client
        else:
            self._http = httpx.Client(base_url=self.server_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "SwarmClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, route: str, body: Optional[dict] = None) -> Any:
        """One control call, retried while the server's store takes no writes (bounded by `store_max_wait`)."""
        deadline = time.monotonic() + self.store_max_wait
        delay = 0.5
        while True:
            try:
                return self._call_once(method, route, body)
            except ServerStoreUnavailable as exc:
                if time.monotonic() + delay > deadline:
                    raise
                logger.warning("%s %s: %s; retrying in %.1fs", method, route, exc.detail, delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _call_once(self, method: str, route: str, body: Optional[dict] = None) -> Any:
        """One control call with bounded retries on transport errors; raises typed errors."""
        delay = 0.2
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._http.request(method, f"/swarm/{route}", json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if attempt == self.max_retries:
                    raise SwarmConnectionError(f"{self.server_url}/swarm/{route}: {exc!r}") from exc
                logger.warning(
                    "%s %s failed (%r); retry %d/%d in %.1fs", method, route, exc, attempt + 1, self.max_retries, delay
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if resp.status_code >= 400:
                raise _error_from_response(resp)
            return resp.json()
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ engine
    def sync_train_config(self, job: AgentJetJob) -> EngineState:
        """Send the job to the proxy (only while OFFLINE)."""
        return OkResponse.model_validate(self._call("POST", "sync_train_config", {"job": job.to_wire()})).state

    def start_engine(self) -> EngineState:
        """Ask the trainer to boot the synced job (OFFLINE -> BOOTING)."""
        return OkResponse.model_validate(self._call("POST", "start_engine")).state

    def stop_engine(self) -> EngineState:
        """Return the engine to OFFLINE from any state; open episodes are aborted."""
        return OkResponse.model_validate(self._call("POST", "stop_engine")).state

    def auto_sync_train_config_and_start_engine(self, job: AgentJetJob, force_restart: bool = False) -> EngineState:
        """Sync and start if OFFLINE; join the running job otherwise (or restart it with `force_restart`)."""
        body = {"job": job.to_wire(), "force_restart": force_restart}
        state = OkResponse.model_validate(self._call("POST", "auto_sync_train_config_and_start_engine", body)).state
        if self.verbose:
            logger.info("engine %s at %s", state.value, self.server_url)
        return state

    def get_engine_status(self) -> EngineStatus:
        """The engine state, step and policy version."""
        return EngineStatus.model_validate(self._call("GET", "get_engine_status"))

    def set_batch_mode(self, mode: BatchMode | str) -> EngineState:
        """Change the batch policy; it applies to the next training step."""
        body = {"mode": BatchMode(mode).value}
        return OkResponse.model_validate(self._call("POST", "set_batch_mode", body)).state

    # ------------------------------------------------------------------ episodes
    def begin_episode(
        self, discard_episode_timeout: float = 240, episode_type: str = "train", mission: Optional[str] = None
    ) -> tuple[str, OpenaiBaseUrlAndApiKey]:
        """Open an episode; waits with backoff (bounded by `begin_episode_max_wait`) while not ROLLING.

        `mission` (default: the client's) labels the episode's dataset + reward in the statistics.
        """
        body = {
            "discard_episode_timeout": discard_episode_timeout,
            "episode_type": episode_type,
            "mission": mission or self.mission,
        }
        deadline = time.monotonic() + self.begin_episode_max_wait
        delay, silent_since = 0.2, None
        while True:
            try:
                ans = BeginEpisodeResponse.model_validate(self._call("POST", "begin_episode", body))
                break
            except EngineNotReady as exc:
                silent_since = _silent_since(exc, silent_since, self.trainer_max_silence)
                if time.monotonic() + delay > deadline:
                    raise SwarmTimeout(f"engine not ROLLING after {self.begin_episode_max_wait}s: {exc}") from exc
                logger.debug("begin_episode: %s; waiting %.1fs", exc.state, delay)
                time.sleep(delay * (0.75 + random.random() / 2))
                delay = min(delay * 1.5, 5.0)
        creds = OpenaiBaseUrlAndApiKey(
            base_url=f"{self.server_url}/v1", api_key=ans.api_key, model=ans.model, episode_uuid=ans.episode_uuid
        )
        return ans.episode_uuid, creds

    def end_episode(self, task: Task, episode_uuid: str, workflow_output: WorkflowOutput) -> EpisodeResult:
        """Record the reward. Answers only after the reward is committed; ending twice is harmless."""
        body = {
            "episode_uuid": episode_uuid,
            "task": task.model_dump(mode="json"),
            "workflow_output": workflow_output.model_dump(mode="json"),
        }
        result = EpisodeResult.model_validate(self._call("POST", "end_episode", body))
        if result.warning and not self._warned_untrainable:  # once per client: a loop would repeat it forever
            self._warned_untrainable = True
            logger.warning("%s (logged once per client)", result.warning)
        return result

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
        if isinstance(task_or_uuid, Task):
            if episode_uuid is None:
                raise TypeError("abort_episode(task, episode_uuid, workflow_output): episode_uuid is missing")
            uuid = episode_uuid
        elif episode_uuid is not None or workflow_output is not None:
            raise TypeError("abort_episode takes (episode_uuid) or (task, episode_uuid, workflow_output)")
        else:
            uuid = task_or_uuid
        return EpisodeResult.model_validate(self._call("POST", "abort_episode", {"episode_uuid": uuid}))

    def can_continue_episode(self, episode_uuid: str) -> bool:
        """Whether the episode is still open: a long agent can check it and stop early once the server has
        expired (or anyone has ended or aborted) the episode. The reason is logged when it cannot."""
        answer = EpisodeContinuation.model_validate(
            self._call("POST", "can_continue_episode", {"episode_uuid": episode_uuid})
        )
        if not answer.can_continue:
            logger.info("episode %s cannot continue: %s", episode_uuid, answer.reason)
        return answer.can_continue

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

    def print_rollout_stat(self, file: Optional[TextIO] = None) -> None:
        """Print a compact pool summary (one screen)."""
        from ajet.rollout_summary import format_rollout_stat

        print(format_rollout_stat(self.get_rollout_stat()), file=file or sys.stdout)


def _error_from_response(resp: httpx.Response) -> Exception:
    try:
        data = resp.json()
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    detail = data.get("detail") or resp.text[:500]
    return error_for(resp.status_code, str(data.get("error", resp.reason_phrase)), str(detail), data.get("state"))


def _silent_since(exc: EngineNotReady, since: Optional[float], max_silence: float) -> Optional[float]:
    """When `begin_episode` first heard that the trainer is silent (None once it speaks again); raises `exc` once
    the silence has lasted `max_silence` seconds, since waiting longer on a dead trainer would never end."""
    if not isinstance(exc, TrainerUnresponsive):
        return None
    now = time.monotonic()
    if since is not None and now - since >= max_silence:
        raise TrainerUnresponsive(
            exc.status, exc.error, f"{exc.detail} (waited {now - since:.0f}s for it; giving up)", exc.state
        ) from exc
    return since if since is not None else now

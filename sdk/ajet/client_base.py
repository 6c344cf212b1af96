"""What `SwarmClient` and `AsyncSwarmClient` share: their settings, every request body and answer, and the rules of
their waits, with no I/O (as httpx's `BaseClient` serves its `Client` and `AsyncClient`). Each client only sends
what these build and sleeps what these say."""

from __future__ import annotations

import logging
import os
import random
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Generic, Optional, TypeVar, Union

import httpx
from pydantic import BaseModel, ValidationError

from ajet.errors import InvalidRequest, NotReady, SwarmConnectionError, SwarmTimeout, TrainerUnresponsive, error_for
from ajet.job import AgentJetJob
from ajet.kept_rewards import KeptEnd, KeptRewards, default_folder, kept_path
from ajet.protocol import CLIENT_HEADER, EXPERIMENT_HEADER
from ajet.sharing import experiment_of
from ajet.template_verdict import TemplateVerdict
from ajet.types import (
    BeginEpisodeRequest,
    BeginEpisodeResponse,
    EndEpisodeRequest,
    EpisodeContinuation,
    EpisodeResult,
    ExperimentState,
    ExperimentStatus,
    OkResponse,
    OpenaiBaseUrlAndApiKey,
    Task,
    WorkflowOutput,
)

logger = logging.getLogger("ajet.client")

Body = Optional[dict[str, Any]]
H = TypeVar("H", httpx.Client, httpx.AsyncClient)

POOL_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=4.0)
"""No cap on a client's connections, nor on those it keeps alive. With httpx's caps (100, of which 20 kept), every
burst of more than 20 episodes had the pool close its surplus connections, and httpcore 1.0.9 can close one it has
just handed to another thread's request (encode/httpcore#1110): that request then waits out its whole read
timeout, or reads a closed socket (`Bad file descriptor`). The demo met it as a 60 s stall, and as a begin whose
answer was lost, retried into a second episode (the first left open: `request_id` now answers the retry with it).
An idle connection is dropped after 4 s, before a server with uvicorn's default 5 s keep-alive closes it under a
new request (`ajet-proxy` keeps idle connections 65 s: `ajet_proxy.cli.KEEP_ALIVE_S`)."""


class ClientSettings(Generic[H]):
    """One client's settings and its request and answer rules (`SwarmClient`, `AsyncSwarmClient`, each with its
    own `httpx` client: `http_client`, when given, lends its base URL and transport, e.g. an app served in this
    process)."""

    def __init__(
        self,
        server_url: str,
        *,
        swarm_token: Optional[str] = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        begin_episode_max_wait: float = 3600.0,
        trainer_max_silence: Optional[float] = None,
        store_max_wait: float = 60.0,
        client_id: Optional[str] = None,
        mission: Optional[str] = None,
        experiment: Optional[str] = None,
        verbose: bool = True,
        http_client: Optional[H] = None,
        kept_rewards: Optional[Union[str, os.PathLike[str]]] = None,
    ):
        self.server_url = server_url.rstrip("/")
        self.swarm_token = swarm_token if swarm_token is not None else os.environ.get("AJET_SWARM_TOKEN")
        self.timeout = timeout
        self.max_retries = max_retries
        """Retries of a control call on a transport error (refused connection, timeout), with backoff."""
        self.begin_episode_max_wait = begin_episode_max_wait
        """Seconds `begin_episode` waits (with backoff) while the swarm cannot take an episode (`NotReady`)."""
        self.trainer_max_silence = trainer_max_silence
        """Seconds `begin_episode` waits, beyond the swarm's own bound, for a trainer that writes no heartbeat
        (`TrainerUnresponsive`) before it raises. None: the swarm's bound (its `trainer_timeout_s`, a setting of the
        proxy) is the wait: the first `TrainerUnresponsive` is raised, the trainer having been silent that long."""
        self.store_max_wait = store_max_wait
        """Seconds a call is retried while the server's store takes no writes (`StoreUnavailable`: a full
        disk, a database down); nothing of a refused call was committed, so the retry is safe."""
        self.client_id = client_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.mission = mission
        self.experiment = experiment
        """The experiment this client's control calls act on (`project_name/experiment_name` of a job, sent as
        `X-Ajet-Experiment`); a sync sets it to the synced job's; None: the swarm's default."""
        self.verbose = verbose
        self._kept = KeptRewards(kept_path(Path(kept_rewards) if kept_rewards else default_folder(), self.server_url))
        """The `end_episode` requests the swarm could not take, sent again later (`ajet.kept_rewards`)."""
        self._warned_untrainable = False
        self._told_templates: set[str] = set()
        """The template preflights this client has logged (each once)."""
        self._given: Optional[H] = None
        """The `httpx` client lent by the caller (this client's headers added), used instead of its own."""
        if http_client is not None:
            http_client.headers.update(self._headers)
            self._given = http_client
        self._start()

    def _start(self) -> None:
        """Set up the client's transport (called last in `__init__`)."""
        raise NotImplementedError

    @property
    def _headers(self) -> dict[str, str]:
        """Every control call's headers: the client id, and the swarm token when there is one."""
        out = {CLIENT_HEADER: self.client_id}
        if self.swarm_token:
            out["Authorization"] = f"Bearer {self.swarm_token}"
        return out

    def _keep_end(self, body: dict[str, Any]) -> None:
        """Keep an `end_episode` request the swarm could not take, to send it again later."""
        self._kept.keep(KeptEnd(body, self.client_id, self.experiment, time.time()))

    @staticmethod
    def _kept_headers(end: KeptEnd) -> dict[str, str]:
        """A kept request's headers: the client and experiment it was made with."""
        return {CLIENT_HEADER: end.client_id, **({EXPERIMENT_HEADER: end.experiment} if end.experiment else {})}

    def _experiment_headers(self) -> dict[str, str]:
        """The experiment a control call acts on, when this client names one (it names its job's once it synced)."""
        return {EXPERIMENT_HEADER: self.experiment} if self.experiment else {}

    def _name_experiment(self, job: AgentJetJob) -> None:
        """From a sync on, act on the synced job's experiment."""
        self.experiment = experiment_of(job)

    # ------------------------------------------------------------------ bodies and answers
    def _synced(self, data: Any) -> ExperimentState:
        """The state a sync answered, its template preflight logged once (`_told`)."""
        answer = OkResponse.model_validate(data)
        self._told(answer.template)
        return answer.state

    def _status(self, data: Any) -> ExperimentStatus:
        """The experiment's status, its template preflight logged once (`_told`)."""
        status = ExperimentStatus.model_validate(data)
        self._told(status.template)
        return status

    def _told(self, verdict: Optional[TemplateVerdict]) -> None:
        """Log the trainer's template preflight of the job's model, once per verdict: a warning when some agent
        shape falls back to re-rendered text (its calls then train as separate sequences), else a line of info."""
        if verdict is None:
            return
        line = verdict.summary()
        if line in self._told_templates:
            return
        self._told_templates.add(line)
        (logger.info if verdict.merges else logger.warning)("%s", line)

    def _begin_body(self, discard_episode_timeout: float, episode_type: str, mission: Optional[str]) -> dict[str, Any]:
        return wire_body(
            BeginEpisodeRequest,
            discard_episode_timeout=discard_episode_timeout,
            episode_type=episode_type,
            mission=mission or self.mission,
            request_id=uuid.uuid4().hex,  # one per begin_episode call, sent again by each of its retries
        )

    def _credentials(self, data: Any) -> tuple[str, OpenaiBaseUrlAndApiKey]:
        ans = BeginEpisodeResponse.model_validate(data)
        creds = OpenaiBaseUrlAndApiKey(
            base_url=f"{self.server_url}/v1", api_key=ans.api_key, model=ans.model, episode_uuid=ans.episode_uuid
        )
        return ans.episode_uuid, creds

    @staticmethod
    def _end_body(task: Task, episode_uuid: str, workflow_output: WorkflowOutput) -> dict[str, Any]:
        # the parts as given (python mode): JSON mode would rewrite a key holding a lone surrogate before any check
        parts = {"task": task.model_dump(), "workflow_output": workflow_output.model_dump()}
        return wire_body(EndEpisodeRequest, episode_uuid=episode_uuid, **parts)

    def _ended(self, data: Any) -> EpisodeResult:
        result = EpisodeResult.model_validate(data)
        if result.warning and not self._warned_untrainable:  # once per client: a loop would repeat it forever
            self._warned_untrainable = True
            logger.warning("%s (logged once per client)", result.warning)
        return result

    @staticmethod
    def _continues(episode_uuid: str, answer: EpisodeContinuation) -> bool:
        if not answer.can_continue:
            logger.info("episode %s cannot continue: %s", episode_uuid, answer.reason)
        return answer.can_continue

    @staticmethod
    def _abort_uuid(
        task_or_uuid: Union[Task, str], episode_uuid: Optional[str], workflow_output: Optional[WorkflowOutput]
    ) -> str:
        """The episode `abort_episode` names: `(episode_uuid)`, or the seed's `(task, episode_uuid, output)`."""
        if isinstance(task_or_uuid, Task):
            if episode_uuid is None:
                raise TypeError("abort_episode(task, episode_uuid, workflow_output): episode_uuid is missing")
            return episode_uuid
        if episode_uuid is not None or workflow_output is not None:
            raise TypeError("abort_episode takes (episode_uuid) or (task, episode_uuid, workflow_output)")
        return task_or_uuid


def wire_body(model: type[BaseModel], **fields: Any) -> dict[str, Any]:
    """A request body checked by the wire model the server validates it with, as the JSON sent: the SDK sends what
    it was given or refuses it (`InvalidRequest` naming the field, before anything is sent), never a value the
    server would refuse or store otherwise (a key holding a lone surrogate, a NUL, a non-finite number)."""
    try:
        return model(**fields).model_dump(mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        why = str(first["msg"]).removeprefix("Value error, ")
        named, _, reason = why.partition(": ")  # the storable checks name the field within: take their path
        if named.startswith(where) and reason:
            where, why = named, reason
        raise InvalidRequest.for_field(where, f"{why} (refused before it was sent)") from None


def error_from_response(resp: httpx.Response) -> Exception:
    """The typed exception of a server's error answer."""
    try:
        data = resp.json()
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    detail = data.get("detail") or resp.text[:500]
    listed = data.get("fields")
    fields = listed if isinstance(listed, list) else []
    code = str(data.get("error", resp.reason_phrase))
    return error_for(resp.status_code, code, str(detail), data.get("state"), [str(f) for f in fields])


class TransportBackoff:
    """Delays between retries of one control call on transport errors; `SwarmConnectionError` once spent."""

    def __init__(self, url: str, max_retries: int):
        self.url, self.left, self.delay = url, max_retries, 0.2

    def next(self, exc: Exception) -> float:
        if self.left <= 0:
            raise SwarmConnectionError(f"{self.url}: {exc!r}") from exc
        self.left -= 1
        delay, self.delay = self.delay, min(self.delay * 2, 5.0)
        logger.warning("%s failed (%r); retrying in %.1fs", self.url, exc, delay)
        return delay


class StoreWait:
    """Delays while the server's store takes no writes; raises the store's error once `max_wait` is spent."""

    def __init__(self, max_wait: float):
        self.deadline, self.delay = time.monotonic() + max_wait, 0.5

    def next(self, exc: Exception, what: str) -> float:
        if time.monotonic() + self.delay > self.deadline:
            raise exc
        delay, self.delay = self.delay, min(self.delay * 2, 5.0)
        logger.warning("%s: %s; retrying in %.1fs", what, exc, delay)
        return delay


class BeginWait:
    """Delays of `begin_episode` while the swarm cannot take it (not ROLLING, a mission's share or the job's
    `max_open_episodes` reached: `SwarmTimeout` past `max_wait`), and while the trainer is silent
    (`TrainerUnresponsive` past `max_silence`)."""

    def __init__(self, max_wait: float, max_silence: Optional[float]):
        self.max_wait, self.max_silence = max_wait, max_silence
        self.deadline, self.delay = time.monotonic() + max_wait, 0.2
        self.silent_since: Optional[float] = None

    def next(self, exc: NotReady) -> float:
        self._silence(exc)
        if time.monotonic() + self.delay > self.deadline:
            raise SwarmTimeout(
                f"begin_episode waited {self.max_wait}s and the swarm still cannot take it: {exc}"
            ) from exc
        logger.debug("begin_episode: %s; waiting %.1fs", exc.state, self.delay)
        delay, self.delay = self.delay * (0.75 + random.random() / 2), min(self.delay * 1.5, 5.0)
        return delay

    def _silence(self, exc: NotReady) -> None:
        """A silent trainer is waited for at most `max_silence` seconds more (None: not at all beyond the swarm's
        bound), since waiting on a dead one never ends."""
        if not isinstance(exc, TrainerUnresponsive):
            self.silent_since = None
            return
        if self.max_silence is None:  # the swarm waited its own bound (`trainer_timeout_s`) before saying so
            raise exc
        now = time.monotonic()
        if self.silent_since is None:
            self.silent_since = now
        elif now - self.silent_since >= self.max_silence:
            waited = f"{exc.detail} (waited {now - self.silent_since:.0f}s for it; giving up)"
            raise TrainerUnresponsive(waited, state=exc.state, status=exc.status, error=exc.error) from exc

"""The one error tree of AgentJet Swarm: every error the swarm answers with is a class here, raised by the server
(the proxy, the store, the trainer's engine) and raised again by the SDK from the answer.

`SwarmError` is an error the swarm answers with; its `code` (an `ErrorCode`, `ajet.protocol`) decides the HTTP
status, the Retry-After hint and the error shapes, so the proxy maps every error to HTTP in one place
(`ajet_proxy.errors`) and the SDK maps every answer back to its class in one place (`error_for`). Two answers with
the same status are told apart by their code: a wrong state and an episode conflict are both 409 (both
`Conflict`). Each server package adds a branch of its own under this tree for what only it raises
(`ajet_store.StoreError`, `ajet_trainer.TrainerError`); `AjetError` is the root of everything.
"""

from __future__ import annotations

from typing import ClassVar, Optional, Sequence

from ajet.protocol import ErrorCode


class AjetError(Exception):
    """Root of every AgentJet Swarm exception."""


class ConfigError(AjetError, ValueError):
    """A job, a dataset reader or another local configuration is invalid."""


class CannotListen(AjetError):
    """A command cannot listen on its address (another process holds the port, or the address is not this
    machine's); raised before it says it is listening."""


class SwarmConnectionError(AjetError):
    """The proxy could not be reached after the bounded retries."""


class EvaluationFailed(AjetError):
    """Some eval episodes of an evaluation failed on every try: it is not recorded (its figures would leave them
    out)."""


class JudgeError(AjetError):
    """A judge's answer that cannot be read as its score (never taken as a 0): the episode it judged gets no score."""


class SwarmTimeout(AjetError):
    """Waiting for the swarm (e.g. in `begin_episode`, or for a training step) took longer than allowed."""


class SwarmError(AjetError):
    """An error the swarm answers with. `code` decides how it is answered (`ajet.protocol.ErrorCode`); `detail` is
    the reason, `state` the experiment's state where the error depends on it, `fields` the offending request fields
    (dotted paths), `status` the HTTP status it came with (the code's, unless an answer said otherwise)."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        detail: str,
        *,
        state: Optional[str] = None,
        fields: Sequence[str] = (),
        status: Optional[int] = None,
        error: Optional[str] = None,
    ):
        self.detail = detail
        self.state = state
        self.fields = list(fields)
        self.status = self.code.status if status is None else status
        self.error = error or self.code.value
        """The error code as answered (the code's value; an unknown code from a newer server is kept as it came)."""
        super().__init__(f"{self.status} {self.error}: {detail}" + (f" (experiment state {state})" if state else ""))

    @property
    def param(self) -> Optional[str]:
        """The first offending field (OpenAI's `param`), if any."""
        return self.fields[0] if self.fields else None


class Unauthorized(SwarmError):
    """401: a wrong swarm token, or an episode key that does not work (unknown, ended, aborted or expired: the
    detail says which)."""

    code = ErrorCode.UNAUTHORIZED


class Forbidden(Unauthorized):
    """403: no token opens this route from where the call came (the explorer of a swarm without a swarm token,
    asked from another machine)."""

    code = ErrorCode.FORBIDDEN


class EpisodeNotFound(SwarmError):
    """404: the episode does not exist."""

    code = ErrorCode.EPISODE_NOT_FOUND


class ExperimentNotFound(SwarmError):
    """404: the swarm has no experiment of the name a control call gave (`ajet.protocol.EXPERIMENT_HEADER`)."""

    code = ErrorCode.EXPERIMENT_NOT_FOUND


class Conflict(SwarmError):
    """409: the call does not fit the experiment's state or the episode's status."""

    code = ErrorCode.EPISODE_CONFLICT


class WrongState(Conflict):
    """409: the experiment's state does not allow the call (e.g. `sync_train_config` while not OFFLINE)."""

    code = ErrorCode.WRONG_STATE


class EpisodeConflict(Conflict):
    """409: the episode's status or owner conflicts with the call (e.g. ending an aborted episode)."""

    code = ErrorCode.EPISODE_CONFLICT


class JobConflict(Conflict):
    """409: the client's job differs from the one the swarm trains (`detail` names the fields); the swarm never
    joins a client to another job silently."""

    code = ErrorCode.JOB_CONFLICT


class BootFailed(Conflict):
    """409: the trainer failed to boot the synced job (`detail` has its reason); retrying cannot help until a
    client fixes the job and starts the engine again, so `begin_episode` raises it at once."""

    code = ErrorCode.BOOT_FAILED


class InvalidRequest(SwarmError):
    """422 on the control API, 400 on `/v1/*`: a malformed body; `fields` names the offending fields."""

    code = ErrorCode.INVALID_REQUEST

    @classmethod
    def for_field(cls, field: str, message: str) -> "InvalidRequest":
        """A request refused for one field (a dotted path, as the client wrote it): "field: message"."""
        return cls(f"{field}: {message}", fields=[field])


class RequestTooLarge(InvalidRequest):
    """413: the request body is over the proxy's size limit."""

    code = ErrorCode.REQUEST_TOO_LARGE


class ContextLengthExceeded(InvalidRequest):
    """400 on `/v1/*` (OpenAI's `context_length_exceeded`): a call's prompt is longer than the job trains
    (`AgentJetJob.max_prompt_length`) or the model's context holds. The call is logged as refused, never trained;
    an agent that compacts its history on this error can go on."""

    code = ErrorCode.CONTEXT_LENGTH_EXCEEDED


class NotReady(SwarmError):
    """503 with Retry-After: the swarm cannot take the call now but will later (the experiment is not ROLLING, no
    engine is registered yet, a mission has its share of the batch in flight, the job's `max_open_episodes` are
    open); retry."""

    code = ErrorCode.NOT_READY


class EngineUnavailable(NotReady):
    """503: no engine could answer the call (e.g. the trainer is restarting); retry later."""

    code = ErrorCode.ENGINE_UNAVAILABLE


class TrainerUnresponsive(NotReady):
    """503: the experiment is ROLLING but the trainer has written no heartbeat for longer than the swarm's
    `trainer_timeout_s` (it died, or it hangs). `begin_episode` raises it (after `SwarmClient.trainer_max_silence`
    seconds more, when set). `silent_s`: the heartbeat's age, where the server knows it."""

    code = ErrorCode.TRAINER_UNRESPONSIVE

    def __init__(
        self,
        detail: str,
        *,
        silent_s: float = 0.0,
        state: Optional[str] = None,
        fields: Sequence[str] = (),
        status: Optional[int] = None,
        error: Optional[str] = None,
    ):
        super().__init__(detail, state=state, fields=fields, status=status, error=error)
        self.silent_s = silent_s


class TrainerStopped(SwarmError):
    """503 without Retry-After: the trainer stopped cleanly (SIGTERM, Ctrl-C) and said so in the store; no episode
    begins until one is started again, so `begin_episode` raises this at once instead of waiting."""

    code = ErrorCode.TRAINER_STOPPED


class StoreError(SwarmError):
    """500: the server's store is of another schema version, or inconsistent."""

    code = ErrorCode.STORE_ERROR


class StoreUnavailable(StoreError):
    """503: the server's store refused a write or a read (disk full, database down); nothing of the call was
    committed. The SDK retries the call for a bounded time (`SwarmClient.store_max_wait`), then raises this."""

    code = ErrorCode.STORE_UNAVAILABLE


class RouteNotFound(SwarmError):
    """404/405: the proxy has no such route or method (a proxy of another version than this SDK?)."""

    code = ErrorCode.ROUTE_NOT_FOUND


class MethodNotAllowed(RouteNotFound):
    """405: the route exists, the method does not."""

    code = ErrorCode.METHOD_NOT_ALLOWED


class ModelNotFound(RouteNotFound):
    """404 on `/v1/models/{model}`: the policy is served under other names."""

    code = ErrorCode.MODEL_NOT_FOUND


_BY_CODE: dict[ErrorCode, type[SwarmError]] = {
    cls.code: cls
    for cls in (
        SwarmError,
        Unauthorized,
        Forbidden,
        EpisodeNotFound,
        ExperimentNotFound,
        WrongState,
        EpisodeConflict,
        JobConflict,
        BootFailed,
        InvalidRequest,
        RequestTooLarge,
        ContextLengthExceeded,
        NotReady,
        EngineUnavailable,
        TrainerUnresponsive,
        TrainerStopped,
        StoreError,
        StoreUnavailable,
        RouteNotFound,
        MethodNotAllowed,
        ModelNotFound,
    )
}
"""The class the SDK raises for each code (each code has exactly one)."""
_BY_STATUS: dict[int, type[SwarmError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: EpisodeNotFound,
    409: Conflict,
    413: RequestTooLarge,
    422: InvalidRequest,
    503: NotReady,
}
"""For an answer without a known code (a plain HTTP server, a newer proxy): the class of its status."""


def error_for(
    status: int, error: str, detail: str, state: Optional[str] = None, fields: Sequence[str] = ()
) -> SwarmError:
    """The exception of a server answer: the class of its error code, else (no known code) of its status."""
    try:
        cls = _BY_CODE.get(ErrorCode(error), SwarmError)
    except ValueError:
        cls = _BY_STATUS.get(status, SwarmError)
    return cls(detail, state=state, fields=fields, status=status, error=error)

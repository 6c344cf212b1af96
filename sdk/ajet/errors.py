"""Typed exceptions of the SDK. Every failure the server reports carries its reason.

A server error is raised as the class named by its `ErrorCode` (see `ajet.protocol`), so answers that
share a status are told apart: `WrongState` and `EpisodeConflict` are both 409 (both are `Conflict`).
"""

from __future__ import annotations

from typing import Optional

from ajet.protocol import ErrorCode


class AjetError(Exception):
    """Root of every SDK exception."""


class ConfigError(AjetError, ValueError):
    """A job, a dataset reader or another local configuration is invalid."""


class CannotListen(AjetError):
    """A command cannot listen on its address (another process holds the port, or the address is not this
    machine's); raised before it says it is listening."""


class SwarmConnectionError(AjetError):
    """The proxy could not be reached after the bounded retries."""


class SwarmTimeout(AjetError):
    """Waiting for the engine (e.g. in `begin_episode`, or for a training step) took longer than allowed."""


class SwarmServerError(AjetError):
    """The proxy answered with an error. `status`, `error` (the code) and `detail` are the server's."""

    def __init__(self, status: int, error: str, detail: str, state: Optional[str] = None):
        super().__init__(f"{status} {error}: {detail}" + (f" (engine state {state})" if state else ""))
        self.status = status
        self.error = error
        self.detail = detail
        self.state = state

    @property
    def code(self) -> Optional[ErrorCode]:
        """The server's error code (None for an answer without one, e.g. from a plain HTTP server)."""
        try:
            return ErrorCode(self.error)
        except ValueError:
            return None


class Unauthorized(SwarmServerError):
    """401: a wrong swarm token, or an unknown, ended or expired episode key."""


class EpisodeNotFound(SwarmServerError):
    """404: the episode does not exist."""


class Conflict(SwarmServerError):
    """409: the call does not fit the engine state or the episode's status."""


class WrongState(Conflict):
    """409: the engine state does not allow the call (e.g. `sync_train_config` while not OFFLINE)."""


class EpisodeConflict(Conflict):
    """409: the episode's status or owner conflicts with the call (e.g. ending an aborted episode)."""


class EngineBootFailed(Conflict):
    """409: the engine failed to boot the synced job (`detail` has the trainer's reason); retrying cannot help
    until a client fixes the job and starts the engine again, so `begin_episode` raises it at once."""


class InvalidRequest(SwarmServerError):
    """422: a malformed body; `detail` names the field."""


class RequestTooLarge(InvalidRequest):
    """413: the request body is over the proxy's size limit."""


class ContextLengthExceeded(InvalidRequest):
    """400 on `/v1/*` (OpenAI's `context_length_exceeded`): a call's prompt is longer than the job trains
    (`AgentJetJob.max_prompt_length`) or the model's context holds. The call is logged as refused, never trained;
    an agent that compacts its history on this error can go on."""


class EngineNotReady(SwarmServerError):
    """503: the engine is not in a state that allows the call yet; retry later."""


class UpstreamUnavailable(EngineNotReady):
    """503: no inference deployment could answer (e.g. the trainer is restarting); retry later."""


class TrainerUnresponsive(EngineNotReady):
    """503: the engine is ROLLING but the trainer has written no heartbeat for longer than the store's timeout
    (it died, or it is restarting). `begin_episode` waits for it at most `SwarmClient.trainer_max_silence`
    seconds, then raises this."""


class ServerStoreError(SwarmServerError):
    """500: the server's store is missing, of another schema version, or inconsistent."""


class ServerStoreUnavailable(ServerStoreError):
    """503: the server's store refused a write or a read (disk full, database down); nothing of the call was
    committed. The SDK retries the call for a bounded time (`SwarmClient.store_max_wait`), then raises this."""


class RouteNotFound(SwarmServerError):
    """404/405: the proxy has no such route, method or model (a proxy of another version than this SDK?)."""


_BY_CODE: dict[ErrorCode, type[SwarmServerError]] = {
    ErrorCode.UNAUTHORIZED: Unauthorized,
    ErrorCode.EPISODE_NOT_FOUND: EpisodeNotFound,
    ErrorCode.WRONG_STATE: WrongState,
    ErrorCode.EPISODE_CONFLICT: EpisodeConflict,
    ErrorCode.INVALID_REQUEST: InvalidRequest,
    ErrorCode.REQUEST_TOO_LARGE: RequestTooLarge,
    ErrorCode.ENGINE_NOT_READY: EngineNotReady,
    ErrorCode.ENGINE_BOOT_FAILED: EngineBootFailed,
    ErrorCode.TRAINER_UNRESPONSIVE: TrainerUnresponsive,
    ErrorCode.UPSTREAM_UNAVAILABLE: UpstreamUnavailable,
    ErrorCode.STORE_ERROR: ServerStoreError,
    ErrorCode.STORE_UNAVAILABLE: ServerStoreUnavailable,
    ErrorCode.ROUTE_NOT_FOUND: RouteNotFound,
    ErrorCode.METHOD_NOT_ALLOWED: RouteNotFound,
    ErrorCode.MODEL_NOT_FOUND: RouteNotFound,
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: ContextLengthExceeded,
}
_BY_STATUS: dict[int, type[SwarmServerError]] = {
    401: Unauthorized,
    403: Unauthorized,
    404: EpisodeNotFound,
    409: Conflict,
    413: RequestTooLarge,
    422: InvalidRequest,
    503: EngineNotReady,
}


def error_for(status: int, error: str, detail: str, state: Optional[str] = None) -> SwarmServerError:
    """The typed exception of a server answer: by its error code, else (no known code) by its status."""
    try:
        cls = _BY_CODE[ErrorCode(error)]
    except ValueError:
        cls = _BY_STATUS.get(status, SwarmServerError)
    return cls(status, error, detail, state)

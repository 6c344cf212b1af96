"""Typed exceptions of the SDK. Every failure the server reports carries its reason."""

from __future__ import annotations

from typing import Optional


class AjetError(Exception):
    """Root of every SDK exception."""


class ConfigError(AjetError, ValueError):
    """A job, a dataset reader or another local configuration is invalid."""


class SwarmConnectionError(AjetError):
    """The proxy could not be reached after the bounded retries."""


class SwarmTimeout(AjetError):
    """Waiting for the engine (e.g. in `begin_episode`) took longer than allowed."""


class SwarmServerError(AjetError):
    """The proxy answered with an error. `status`, `error` and `detail` are the server's."""

    def __init__(self, status: int, error: str, detail: str, state: Optional[str] = None):
        super().__init__(f"{status} {error}: {detail}" + (f" (engine state {state})" if state else ""))
        self.status = status
        self.error = error
        self.detail = detail
        self.state = state


class Unauthorized(SwarmServerError):
    """401: a wrong swarm token, or an unknown, ended or expired episode key."""


class EpisodeNotFound(SwarmServerError):
    """404: the episode does not exist."""


class Conflict(SwarmServerError):
    """409: the call does not fit the engine state or the episode's status."""


class InvalidRequest(SwarmServerError):
    """422: a malformed body; `detail` names the field."""


class EngineNotReady(SwarmServerError):
    """503: the engine is not in a state that allows the call (yet)."""


_BY_STATUS = {401: Unauthorized, 403: Unauthorized, 404: EpisodeNotFound, 409: Conflict, 422: InvalidRequest,
              503: EngineNotReady}


def error_for_status(status: int, error: str, detail: str, state: Optional[str] = None) -> SwarmServerError:
    """The typed exception for an HTTP error status."""
    cls = _BY_STATUS.get(status, SwarmServerError)
    return cls(status, error, detail, state)

"""Proxy errors. One root class; `app.py` maps each to its HTTP status in one handler."""

from __future__ import annotations

from typing import Optional


class ProxyError(Exception):
    """Root of every proxy error. `status` is the HTTP status the handler answers with."""

    status = 500
    retry_after: Optional[int] = None
    """Seconds for a Retry-After header (errors a client should retry)."""

    def __init__(self, detail: str, *, state: Optional[str] = None, fields: Optional[list[str]] = None):
        super().__init__(detail)
        self.detail = detail
        self.state = state
        self.fields = fields or []


class Unauthorized(ProxyError):
    """A wrong swarm token, or an unknown, ended or expired episode key."""

    status = 401


class EpisodeNotFound(ProxyError):
    """No episode with that uuid."""

    status = 404


class WrongState(ProxyError):
    """The engine state does not allow the call (state named)."""

    status = 409


class EpisodeConflict(ProxyError):
    """The episode's status conflicts with the call (e.g. end after abort, another reward)."""

    status = 409


class InvalidInput(ProxyError):
    """A malformed body; `fields` names the offending fields."""

    status = 422


class EngineNotRolling(ProxyError):
    """The engine cannot take this call now but will later (answered with Retry-After)."""

    status = 503
    retry_after = 1


class UpstreamError(ProxyError):
    """No policy deployment could answer (e.g. the trainer is restarting): retry later."""

    status = 503
    retry_after = 2


class StoreError(ProxyError):
    """The store is missing, of another schema version, or inconsistent."""

    status = 500

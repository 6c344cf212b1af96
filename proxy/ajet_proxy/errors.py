"""Proxy errors, and the one table that maps every domain error to its HTTP answer.

`ProxyError` is the root of the errors the proxy raises itself (auth, bad bodies, no upstream). The
store raises its own domain errors (`ajet_store.StoreError`), which know nothing of HTTP. `http_error`
turns either into an `HttpError` (status, code, headers) through `STORE_ERROR_CODES`, as httpx maps
transport exceptions at one boundary; `app.py` calls it from its one exception handler. The codes and
their statuses are the SDK's (`ajet.protocol`), so both sides name every error the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

import orjson
from starlette.responses import Response

import ajet_store
from ajet.protocol import ErrorBody, ErrorCode, anthropic_error_body, openai_error_body, openai_status


class ProxyError(Exception):
    """Root of every error the proxy raises itself (never raised as such). `code` decides the HTTP answer."""

    code: ClassVar[ErrorCode]

    def __init__(self, detail: str, *, state: Optional[str] = None, fields: Optional[list[str]] = None):
        super().__init__(detail)
        self.detail = detail
        self.state = state
        self.fields = fields or []


class Unauthorized(ProxyError):
    """A wrong swarm token, or an episode key that does not work (unknown, ended, aborted or expired: the
    message says which)."""

    code = ErrorCode.UNAUTHORIZED


class InvalidRequest(ProxyError):
    """A malformed body; `fields` names the offending fields."""

    code = ErrorCode.INVALID_REQUEST


class PromptTooLong(ProxyError):
    """A call's prompt is over the job's `max_prompt_length` (OpenAI's `context_length_exceeded`)."""

    code = ErrorCode.CONTEXT_LENGTH_EXCEEDED


class EngineNotReady(ProxyError):
    """The engine cannot take this call now but will later (answered with Retry-After)."""

    code = ErrorCode.ENGINE_NOT_READY


class EngineBootFailed(ProxyError):
    """The engine failed to boot the synced job; retrying cannot help until it is started again."""

    code = ErrorCode.ENGINE_BOOT_FAILED


class ModelNotFound(ProxyError):
    """A data-plane call named a model this proxy does not serve."""

    code = ErrorCode.MODEL_NOT_FOUND


class UpstreamUnavailable(ProxyError):
    """No policy deployment could answer (e.g. the trainer is restarting): retry later."""

    code = ErrorCode.UPSTREAM_UNAVAILABLE


STORE_ERROR_CODES: dict[type[ajet_store.StoreError], ErrorCode] = {
    ajet_store.NotFound: ErrorCode.EPISODE_NOT_FOUND,
    ajet_store.Conflict: ErrorCode.EPISODE_CONFLICT,
    ajet_store.WrongState: ErrorCode.WRONG_STATE,
    ajet_store.NotRolling: ErrorCode.ENGINE_NOT_READY,
    ajet_store.TrainerSilent: ErrorCode.TRAINER_UNRESPONSIVE,
    ajet_store.SchemaMismatch: ErrorCode.STORE_ERROR,
    ajet_store.StoreUnavailable: ErrorCode.STORE_UNAVAILABLE,
    ajet_store.StoreWriteFailed: ErrorCode.STORE_UNAVAILABLE,
    ajet_store.StoreRefusedValue: ErrorCode.INVALID_REQUEST,
    ajet_store.AlreadyConsumed: ErrorCode.STORE_ERROR,
}
"""Store error class -> the code it is answered with (a class not listed answers as its nearest base)."""


@dataclass(frozen=True)
class HttpError:
    """How one error is answered."""

    code: ErrorCode
    """The error code; its status and Retry-After come from `ajet.protocol`."""
    detail: str
    """The human-readable reason."""
    state: Optional[str] = None
    """The engine state, where the error depends on it."""
    fields: list[str] = field(default_factory=list)
    """Offending request fields."""

    @property
    def status(self) -> int:
        """The HTTP status."""
        return self.code.status

    @property
    def headers(self) -> Optional[dict[str, str]]:
        """Retry-After for errors a client should retry."""
        after = self.code.retry_after
        return {"Retry-After": str(after)} if after else None


DATA_PLANE_PREFIX = "/v1/"
"""Routes answered in OpenAI's error shape (the agent's SDK reads them); the rest get an `ErrorBody`."""
ANTHROPIC_PREFIX = "/v1/messages"
"""Anthropic's Messages API: answered in Anthropic's error shape (what the anthropic SDK reads)."""


def openai_error(
    code: ErrorCode,
    message: str,
    param: Optional[str] = None,
    status: Optional[int] = None,
    headers: Optional[dict[str, str]] = None,
) -> Response:
    """An OpenAI error object (`{"error": {"message", "type", "param", "code"}}`): what the openai SDK and the
    frameworks on it read. `status`: the code's OpenAI status unless given (a backend's own)."""
    data = openai_error_body(code, message, param).model_dump()
    return Response(orjson.dumps(data), status_code=status or openai_status(code), media_type="application/json",
                    headers=headers)  # fmt: skip


def anthropic_error(
    code: ErrorCode, message: str, status: Optional[int] = None, headers: Optional[dict[str, str]] = None
) -> Response:
    """An Anthropic error object: what the anthropic SDK reads."""
    data = anthropic_error_body(code, message).model_dump()
    return Response(orjson.dumps(data), status_code=status or openai_status(code), media_type="application/json",
                    headers=headers)  # fmt: skip


def error_response(err: HttpError, path: str = "") -> Response:
    """The one choice of error shape, by the route's API: Anthropic's error under `/v1/messages`, OpenAI's error
    object elsewhere under `/v1/`, else an `ErrorBody`; the error's headers."""
    if path.startswith(ANTHROPIC_PREFIX):
        text = (
            f"{err.fields[0]}: {err.detail}" if err.fields and not err.detail.startswith(err.fields[0]) else err.detail
        )
        return anthropic_error(err.code, text, headers=err.headers)
    if path.startswith(DATA_PLANE_PREFIX):
        return openai_error(err.code, err.detail, err.fields[0] if err.fields else None, headers=err.headers)
    body = ErrorBody(error=err.code.value, detail=err.detail, state=err.state, fields=err.fields)
    return Response(
        orjson.dumps(body.model_dump(exclude_none=True)),
        status_code=err.status,
        media_type="application/json",
        headers=err.headers,
    )


def store_error_code(exc: ajet_store.StoreError) -> ErrorCode:
    """The code of a store error: its own class's, else its nearest listed base's."""
    for cls in type(exc).__mro__:
        if cls in STORE_ERROR_CODES:
            return STORE_ERROR_CODES[cls]
    return ErrorCode.STORE_ERROR


def http_error(exc: ProxyError | ajet_store.StoreError) -> HttpError:
    """The HTTP answer to a proxy or store error."""
    if isinstance(exc, ProxyError):
        return HttpError(exc.code, exc.detail, exc.state, exc.fields)
    return HttpError(store_error_code(exc), exc.detail, exc.state)

"""The one place where an error becomes an HTTP answer.

Every error the proxy, the store and the engines raise is a class of the SDK's one error tree (`ajet.errors`),
and its `code` (`ajet.protocol.ErrorCode`) decides the status, the Retry-After hint and the body; `http_error`
reads it, `error_response` writes the body in the shape of the route's API (an `ErrorBody` on the control API,
OpenAI's error object on `/v1/*`, Anthropic's on `/v1/messages`). `app.py` calls them from its one exception
handler, as httpx maps transport exceptions at one boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import orjson
from starlette.responses import Response

from ajet.errors import SwarmError
from ajet.protocol import ErrorBody, ErrorCode, anthropic_error_body, openai_error_body, openai_status


@dataclass(frozen=True)
class HttpError:
    """How one error is answered."""

    code: ErrorCode
    """The error code; its status and Retry-After come from `ajet.protocol`."""
    detail: str
    """The human-readable reason."""
    state: Optional[str] = None
    """The experiment's state, where the error depends on it."""
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
JUDGE_PREFIX = "/judge/v1/"
"""The served judge's OpenAI-compatible routes (`dataplane/chat/judge.py`): their errors in OpenAI's shape too."""
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
    frameworks on it read. `status`: the code's OpenAI status unless given (an engine's own)."""
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
    if path.startswith((DATA_PLANE_PREFIX, JUDGE_PREFIX)):
        return openai_error(err.code, err.detail, err.fields[0] if err.fields else None, headers=err.headers)
    body = ErrorBody(error=err.code.value, detail=err.detail, state=err.state, fields=err.fields)
    return Response(
        orjson.dumps(body.model_dump(exclude_none=True)),
        status_code=err.status,
        media_type="application/json",
        headers=err.headers,
    )


def http_error(exc: SwarmError) -> HttpError:
    """The HTTP answer to an error of the tree."""
    return HttpError(exc.code, exc.detail, exc.state, exc.fields)

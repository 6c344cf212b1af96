"""`ChatShape`: OpenAI chat completions, written as the backend answered."""

from __future__ import annotations

from typing import Any, Optional

import orjson
from starlette.responses import Response

from ajet.protocol import ErrorCode, openai_error_body
from ajet_proxy.dataplane.sse import sse_payload


class ChatShape:
    """OpenAI chat completions: the backend's answer as it is, less the logprobs the client did not ask for
    (the proxy always asks, to log them)."""

    response_id: Optional[str] = None

    def __init__(self, want_logprobs: bool):
        self.want_logprobs = want_logprobs

    def answer(self, status: int, data: bytes, parsed: Optional[dict[str, Any]]) -> Response:
        if status == 200 and parsed is not None and not self.want_logprobs and _drop_logprobs(parsed):
            data = orjson.dumps(parsed)
        return Response(data, status_code=status, media_type=_media_type(status, parsed))

    def event(self, payload: bytes, data: Optional[dict[str, Any]]) -> bytes:
        if data is not None and not self.want_logprobs and _drop_logprobs(data):
            payload = orjson.dumps(data)
        return sse_payload(payload)

    def done(self, assembled: dict[str, Any]) -> bytes:
        return sse_payload(b"[DONE]")

    def failed(self, code: ErrorCode, message: str) -> bytes:
        return sse_payload(orjson.dumps(openai_error_body(code, message).model_dump()))


def _drop_logprobs(data: dict[str, Any]) -> bool:
    """Remove the choices' logprobs in place; whether there were any."""
    dropped = False
    for ch in data.get("choices") or ():
        if isinstance(ch, dict) and ch.get("logprobs") is not None:
            ch["logprobs"] = None
            dropped = True
    return dropped


def _media_type(status: int, parsed: Optional[dict[str, Any]]) -> str:
    """An answer keeps what it is: JSON, or (a backend's error page) plain text, never relabelled."""
    return "application/json" if status == 200 or parsed is not None else "text/plain; charset=utf-8"

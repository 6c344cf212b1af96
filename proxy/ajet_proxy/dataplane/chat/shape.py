"""`ChatShape`: OpenAI chat completions, written as the engine answered."""

from __future__ import annotations

from typing import Optional

import orjson
from starlette.responses import Response

from ajet.protocol import ErrorCode, openai_error_body
from ajet_proxy.dataplane.sse import sse_payload
from ajet_proxy.dataplane.types import AnswerJson


class ChatShape:
    """OpenAI chat completions: the engine's answer as it is, less what the proxy asked for only to log it: the
    logprobs (unless the client asked for `logprobs`) and the token ids and policy version (unless it asked for
    `return_token_ids`). At agentic prompt sizes the prompt's ids alone are ~6 bytes a token."""

    response_id: Optional[str] = None

    def __init__(self, want_logprobs: bool, want_ids: bool = False):
        self.want_logprobs = want_logprobs
        self.want_ids = want_ids

    def answer(self, status: int, data: bytes, parsed: Optional[AnswerJson]) -> Response:
        if status == 200 and parsed is not None and self._trim(parsed):
            data = orjson.dumps(parsed)
        return Response(data, status_code=status, media_type=_media_type(status, parsed))

    def event(self, payload: bytes, data: Optional[AnswerJson]) -> bytes:
        if data is not None and self._trim(data):
            payload = orjson.dumps(data)
        return sse_payload(payload)

    def _trim(self, data: AnswerJson) -> bool:
        """Remove in place what the client did not ask for; whether anything was removed."""
        trimmed = not self.want_logprobs and _drop_logprobs(data)
        if not self.want_ids:
            trimmed = _drop_ids(data) or trimmed
        return trimmed

    def done(self, assembled: AnswerJson) -> bytes:
        return sse_payload(b"[DONE]")

    def failed(self, code: ErrorCode, message: str) -> bytes:
        return sse_payload(orjson.dumps(openai_error_body(code, message).model_dump()))


def _drop_logprobs(data: AnswerJson) -> bool:
    """Remove the choices' logprobs in place; whether there were any."""
    dropped = False
    for ch in data.get("choices") or ():
        if isinstance(ch, dict) and ch.get("logprobs") is not None:
            ch["logprobs"] = None
            dropped = True
    return dropped


def _drop_ids(data: AnswerJson) -> bool:
    """Remove in place what the proxy asks the engine for (to log it) and passes on only to a client that asked for
    token ids itself (`return_token_ids: true`, as in vLLM): the prompt's ids, its images' grids and the policy version
    at the top, each choice's `token_ids`; whether there were any."""
    dropped = data.pop("prompt_token_ids", None) is not None
    dropped = data.pop("image_grids", None) is not None or dropped
    dropped = data.pop("policy_version", None) is not None or dropped
    for ch in data.get("choices") or ():
        if isinstance(ch, dict):
            dropped = ch.pop("token_ids", None) is not None or dropped
    return dropped


def _media_type(status: int, parsed: Optional[AnswerJson]) -> str:
    """An answer keeps what it is: JSON, or (an engine's error page) plain text, never relabelled."""
    return "application/json" if status == 200 or parsed is not None else "text/plain; charset=utf-8"

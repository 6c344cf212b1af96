"""The API a call came in through, around the one chat-completions path.

Every agent call becomes a chat-completions call to the policy, is logged with its token ids and
logprobs, and trains the same way. What differs per API is only the outside: how the answer (plain,
or streamed event by event) is written for the client. `ApiShape` is that outside; each API folder
(`chat/`, `responses/`, `messages/`) has its own in its `shape.py`. A shape is made per call, so a
stream's translation state lives in it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Optional, Protocol

import orjson
from starlette.responses import Response

from ajet.protocol import ErrorCode
from ajet_proxy.dataplane.types import AnswerJson, ChatToolCall, ChoiceJson


def error_message(data: Optional[AnswerJson], status: int) -> str:
    """The message of an OpenAI-shaped error answer (or a stream's error event), else a plain description."""
    err = data.get("error") if data is not None else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return f"the policy engine answered {status}"


def first_deltas(data: AnswerJson) -> Iterator[tuple[ChoiceJson, str, Sequence[ChatToolCall]]]:
    """What one streamed chat event adds to the answer's first choice (the only one the other APIs carry): the
    choice, its next text ('' when none) and its tool-call pieces."""
    for choice in data.get("choices") or ():
        if choice.get("index", 0) == 0:
            delta = choice.get("delta") or {}
            yield choice, delta.get("content") or "", delta.get("tool_calls") or ()


def json_response(data: Mapping[str, object], status: int = 200) -> Response:
    """A JSON answer."""
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


class ApiShape(Protocol):
    """How one call's chat answer is written for its client."""

    response_id: Optional[str]
    """The id the API gives the answer where a later call may name it (Responses' `previous_response_id`),
    logged with the call so that any proxy on the store can continue from it; None elsewhere."""

    def answer(self, status: int, data: bytes, parsed: Optional[AnswerJson]) -> Response:
        """The whole answer of a plain call (or of a streamed call the engine refused): `data` is the
        engine's body, `parsed` its JSON when it is a JSON object."""
        ...

    def event(self, payload: bytes, data: Optional[AnswerJson]) -> bytes:
        """What to send for one chat-stream event (`data`: the parsed payload; b"" sends nothing)."""
        ...

    def done(self, assembled: AnswerJson) -> bytes:
        """What to send at the end of a complete stream, after the call is committed (`assembled`: the
        stream as one chat completion)."""
        ...

    def failed(self, code: ErrorCode, message: str) -> bytes:
        """What to send when the stream cannot complete (the engine broke off, the store failed)."""
        ...

"""The API a call came in through, around the one chat-completions path.

Every agent call becomes a chat-completions call to the policy, is logged with its token ids and
logprobs, and trains the same way. What differs per API is only the outside: how the answer (plain,
or streamed event by event) is written for the client. `ApiShape` is that outside; `ChatShape` is
the identity (it only takes away the logprobs the proxy asked for and the client did not);
`ajet_proxy.responses_api` and `ajet_proxy.messages_api` write OpenAI Responses and Anthropic
Messages. A shape is made per call, so a stream's translation state lives in it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol

import orjson
from starlette.responses import Response

from ajet.protocol import ErrorCode, openai_error_body

SSE_MEDIA_TYPE = "text/event-stream"


def sse(data: dict[str, Any], event: Optional[str] = None) -> bytes:
    """One server-sent event: `event:` line when named, one `data:` line of JSON."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def error_message(data: Optional[dict[str, Any]], status: int) -> str:
    """The message of an OpenAI-shaped error answer (or a stream's error event), else a plain description."""
    err = (data or {}).get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return f"the policy backend answered {status}"


def carried(body: dict[str, Any], renames: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The fields of another API's request that chat has too, under chat's names (absent or null: left out)."""
    return {theirs: body[ours] for ours, theirs in renames if body.get(ours) is not None}


def with_tools(
    chat: dict[str, Any],
    body: dict[str, Any],
    tools: Callable[[Any], list[dict[str, Any]]],
    choice: Callable[[Any], Any],
) -> dict[str, Any]:
    """`chat` with the request's tools and tool choice converted to chat's shape (`tools`, `choice`)."""
    if body.get("tools") is not None:
        converted = tools(body["tools"])
        if converted:
            chat["tools"] = converted
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = choice(body["tool_choice"])
    return chat


def json_response(data: dict[str, Any], status: int = 200) -> Response:
    """A JSON answer."""
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


class ApiShape(Protocol):
    """How one call's chat answer is written for its client."""

    def answer(self, status: int, data: bytes, parsed: Optional[dict[str, Any]]) -> Response:
        """The whole answer of a plain call (or of a streamed call the backend refused): `data` is the
        backend's body, `parsed` its JSON when it is a JSON object."""
        ...

    def event(self, payload: bytes, data: Optional[dict[str, Any]]) -> bytes:
        """What to send for one chat-stream event (`data`: the parsed payload; b"" sends nothing)."""
        ...

    def done(self, assembled: dict[str, Any]) -> bytes:
        """What to send at the end of a complete stream, after the call is committed (`assembled`: the
        stream as one chat completion)."""
        ...

    def failed(self, code: ErrorCode, message: str) -> bytes:
        """What to send when the stream cannot complete (the backend broke off, the store failed)."""
        ...


class ChatShape:
    """OpenAI chat completions: the backend's answer as it is, less the logprobs the client did not ask for
    (the proxy always asks, to log them)."""

    def __init__(self, want_logprobs: bool):
        self.want_logprobs = want_logprobs

    def answer(self, status: int, data: bytes, parsed: Optional[dict[str, Any]]) -> Response:
        if status == 200 and parsed is not None and not self.want_logprobs and _drop_logprobs(parsed):
            data = orjson.dumps(parsed)
        return Response(data, status_code=status, media_type=_media_type(status, parsed))

    def event(self, payload: bytes, data: Optional[dict[str, Any]]) -> bytes:
        if data is not None and not self.want_logprobs and _drop_logprobs(data):
            payload = orjson.dumps(data)
        return b"data: " + payload + b"\n\n"

    def done(self, assembled: dict[str, Any]) -> bytes:
        return b"data: [DONE]\n\n"

    def failed(self, code: ErrorCode, message: str) -> bytes:
        return b"data: " + orjson.dumps(openai_error_body(code, message).model_dump()) + b"\n\n"


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

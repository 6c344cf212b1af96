"""`MessagesShape`: a chat answer written as an Anthropic message, plain or as Anthropic's stream.

Streamed, each engine token becomes an event as it arrives: `message_start`, then
`content_block_start` / `content_block_delta` (`text_delta`, or `input_json_delta` for a tool's input)
/ `content_block_stop` per block, and `message_delta` (stop reason, output tokens) with
`message_stop` once the call is committed. Errors are Anthropic's `error` event and error body.
"""

from __future__ import annotations

from typing import Optional

from starlette.responses import Response

from ajet.protocol import ErrorCode, anthropic_error_body
from ajet_proxy.dataplane.messages.answer import message_object, stop_reason, tool_use_block
from ajet_proxy.dataplane.messages.types import ContentBlock
from ajet_proxy.dataplane.shape import error_message, first_deltas, json_response
from ajet_proxy.dataplane.sse import sse
from ajet_proxy.dataplane.types import AnswerJson, ChatToolCall
from ajet_proxy.errors import anthropic_error


class MessagesShape:
    """One Messages call (model name echoed as the client sent it)."""

    response_id: Optional[str] = None

    def __init__(self, model: str, mid: str):
        self.model, self.mid = model, mid
        self._started = False
        self._blocks = 0  # blocks opened so far
        self._open: Optional[str] = None  # "text" or "tool_use" while a block is open
        self._calls: dict[int, int] = {}  # chat tool-call index -> block index
        self._input_tokens = 0

    def answer(self, status: int, data: bytes, parsed: Optional[AnswerJson]) -> Response:
        if status != 200 or parsed is None:
            return anthropic_error(_code(status), error_message(parsed, status), status)
        choice = (parsed.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        text = msg.get("content")
        content: list[ContentBlock] = [{"type": "text", "text": text}] if text else []
        content += [tool_use_block(c) for c in msg.get("tool_calls") or []]
        return json_response(
            message_object(
                self.mid,
                self.model,
                content,
                choice.get("finish_reason"),
                choice.get("stop_reason"),
                parsed.get("usage"),
            )
        )

    # ---------------------------------------------------------------- streamed
    def _start(self, data: AnswerJson) -> bytes:
        if self._started:
            return b""
        self._started = True
        self._input_tokens = len(data.get("prompt_token_ids") or ())
        start = message_object(self.mid, self.model, [], None, None, {"prompt_tokens": self._input_tokens})
        start["stop_reason"] = None
        return sse({"type": "message_start", "message": start}, event="message_start")

    def event(self, payload: bytes, data: Optional[AnswerJson]) -> bytes:
        if data is None:
            return b""
        if "error" in data:
            return self._failure(ErrorCode.ENGINE_UNAVAILABLE, error_message(data, 502))
        out = [self._start(data)]
        for _choice, text, calls in first_deltas(data):
            if text:
                if self._open != "text":
                    out.append(self._close() + self._open_block({"type": "text", "text": ""}, "text"))
                out.append(self._delta({"type": "text_delta", "text": text}))
            out += [self._tool_delta(call) for call in calls]
        return b"".join(out)

    def _open_block(self, block: ContentBlock, kind: str) -> bytes:
        self._open = kind
        self._blocks += 1
        return sse(
            {"type": "content_block_start", "index": self._blocks - 1, "content_block": block},
            event="content_block_start",
        )

    def _delta(self, delta: dict[str, str]) -> bytes:
        return sse(
            {"type": "content_block_delta", "index": self._blocks - 1, "delta": delta}, event="content_block_delta"
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse({"type": "content_block_stop", "index": self._blocks - 1}, event="content_block_stop")

    def _tool_delta(self, call: ChatToolCall) -> bytes:
        out = b""
        index, fn = call.get("index", 0), call.get("function") or {}
        if index not in self._calls:
            out += self._close()
            block = tool_use_block({"id": call.get("id"), "function": {"name": fn.get("name", ""), "arguments": "{}"}})
            out += self._open_block(block, "tool_use")
            self._calls[index] = self._blocks - 1
        if fn.get("arguments"):
            out += self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]})
        return out

    def done(self, assembled: AnswerJson) -> bytes:
        choice = (assembled.get("choices") or [{}])[0]
        usage = assembled.get("usage") or {}
        reason = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"))
        matched = choice.get("stop_reason") if isinstance(choice.get("stop_reason"), str) else None
        return (
            self._start({})
            + self._close()
            + sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": matched},
                    "usage": {"output_tokens": int(usage.get("completion_tokens") or 0)},
                },
                event="message_delta",
            )
            + sse({"type": "message_stop"}, event="message_stop")
        )

    def failed(self, code: ErrorCode, message: str) -> bytes:
        return self._failure(code, message)

    def _failure(self, code: ErrorCode, message: str) -> bytes:
        return sse(anthropic_error_body(code, message).model_dump(), event="error")


def _code(status: int) -> ErrorCode:
    """The error code of an engine's status (its own 400 stays a client error)."""
    return {
        400: ErrorCode.INVALID_REQUEST,
        401: ErrorCode.UNAUTHORIZED,
        404: ErrorCode.MODEL_NOT_FOUND,
        503: ErrorCode.NOT_READY,
    }.get(status, ErrorCode.ENGINE_UNAVAILABLE)

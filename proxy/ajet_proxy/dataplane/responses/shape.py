"""`ResponsesShape`: a chat answer written as an OpenAI Response, plain or as the Responses stream.

The stream follows the engine token by token: `response.created`, then for the assistant text
`response.output_item.added` / `content_part.added` / `output_text.delta`..., for each function call
`output_item.added` / `function_call_arguments.delta`..., each item closed with its `.done` events,
and `response.completed` (or `response.incomplete` at the token limit) once the call is committed.
Every event carries its `sequence_number`.
"""

from __future__ import annotations

from typing import Optional

from starlette.responses import Response

from ajet.protocol import ErrorCode, openai_error_body
from ajet_proxy.dataplane.responses.answer import call_item, message_item, output_logprobs, response_object
from ajet_proxy.dataplane.responses.protocol import ResponsesRequest
from ajet_proxy.dataplane.responses.types import FunctionCallItem, MessageItem, OutputItem, OutputLogprob
from ajet_proxy.dataplane.shape import error_message, first_deltas, json_response
from ajet_proxy.dataplane.sse import sse
from ajet_proxy.dataplane.types import AnswerJson, ChatToolCall
from ajet_proxy.errors import openai_error


class ResponsesShape:
    """One Responses call, answered as Response `rid` (which a later `previous_response_id` names: the call's turn
    in the episode's history keeps its conversation)."""

    def __init__(self, req: ResponsesRequest, rid: str):
        self.req, self.rid = req, rid
        self.response_id: Optional[str] = rid
        self.want_logprobs = req.wants_logprobs()
        self._seq = 0
        self._started = False
        self._items: list[OutputItem] = []
        self._text: Optional[MessageItem] = None  # the open message item, while text streams
        self._calls: dict[int, FunctionCallItem] = {}  # open function_call items by chat tool-call index

    # ---------------------------------------------------------------- plain
    def answer(self, status: int, data: bytes, parsed: Optional[AnswerJson]) -> Response:
        if status != 200 or parsed is None:
            if parsed is not None and "error" in parsed:  # the engine's own OpenAI error, passed on
                return json_response(parsed, status)
            return openai_error(ErrorCode.ENGINE_UNAVAILABLE, error_message(parsed, status), status=status)
        choice = (parsed.get("choices") or [{}])[0]
        msg = choice.get("message") or {}
        items: list[OutputItem] = []
        if msg.get("content") or not msg.get("tool_calls"):
            items.append(
                message_item(msg.get("content") or "", output_logprobs(choice) if self.want_logprobs else None)
            )
        items += [call_item(c) for c in msg.get("tool_calls") or []]
        return json_response(
            response_object(self.rid, self.req, items, parsed.get("usage"), choice.get("finish_reason"))
        )

    # ---------------------------------------------------------------- streamed
    def _event(self, kind: str, **fields: object) -> bytes:
        self._seq += 1
        return sse({"type": kind, "sequence_number": self._seq - 1, **fields}, event=kind)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        shell = response_object(self.rid, self.req, [], None, None, status="in_progress")
        return self._event("response.created", response=shell) + self._event("response.in_progress", response=shell)

    def event(self, payload: bytes, data: Optional[AnswerJson]) -> bytes:
        if data is None:
            return b""
        if "error" in data:
            return self._failure(ErrorCode.ENGINE_UNAVAILABLE, error_message(data, 502))
        out = [self._start()]
        for choice, text, calls in first_deltas(data):
            if text:
                out.append(self._text_delta(text, output_logprobs(choice) if self.want_logprobs else []))
            out += [self._call_delta(call) for call in calls]
        return b"".join(out)

    def _text_delta(self, text: str, logprobs: list[OutputLogprob]) -> bytes:
        out = b""
        if self._text is None:
            self._text = message_item("", None, status="in_progress")
            self._items.append(self._text)
            index = len(self._items) - 1
            out += self._event("response.output_item.added", output_index=index, item={**self._text, "content": []})
            out += self._event(
                "response.content_part.added",
                item_id=self._text["id"],
                output_index=index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
        part = self._text["content"][0]
        part["text"] += text
        part["logprobs"] += logprobs
        return out + self._event(
            "response.output_text.delta",
            item_id=self._text["id"],
            output_index=self._items.index(self._text),
            content_index=0,
            delta=text,
            logprobs=logprobs,
        )

    def _call_delta(self, call: ChatToolCall) -> bytes:
        out = self._close_text()
        index = call.get("index", 0)
        fn = call.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            item = call_item(
                {"id": call.get("id"), "function": {"name": fn.get("name") or "", "arguments": ""}},
                status="in_progress",
            )
            self._calls[index] = item
            self._items.append(item)
            out += self._event("response.output_item.added", output_index=len(self._items) - 1, item=dict(item))
        if fn.get("arguments"):
            item["arguments"] += fn["arguments"]
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=self._items.index(item),
                delta=fn["arguments"],
            )
        return out

    def _close_text(self) -> bytes:
        item, self._text = self._text, None
        if item is None:
            return b""
        index, part = self._items.index(item), item["content"][0]
        item["status"] = "completed"
        return (
            self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=part["logprobs"],
            )
            + self._event(
                "response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part
            )
            + self._event("response.output_item.done", output_index=index, item=item)
        )

    def _close_calls(self) -> bytes:
        out = b""
        for item in self._calls.values():
            index = self._items.index(item)
            item["status"] = "completed"
            out += self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
            out += self._event("response.output_item.done", output_index=index, item=item)
        self._calls = {}
        return out

    def done(self, assembled: AnswerJson) -> bytes:
        out = self._start()
        if not self._items:  # nothing was said: an empty message, as a plain answer has
            out += self._text_delta("", [])
        out += self._close_text() + self._close_calls()
        choice = (assembled.get("choices") or [{}])[0]
        final = response_object(self.rid, self.req, self._items, assembled.get("usage"), choice.get("finish_reason"))
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=final)

    def failed(self, code: ErrorCode, message: str) -> bytes:
        return self._failure(code, message)

    def _failure(self, code: ErrorCode, message: str) -> bytes:
        """An `error` event: the openai SDK raises it as an `APIError` carrying the message."""
        err = openai_error_body(code, message).error.model_dump()
        return self._start() + self._event("error", code=err["code"], message=message, param=None, error=err)

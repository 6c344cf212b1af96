"""A chat answer as the Responses API writes it: output items, logprobs, the Response object; and a logged call's
conversation, which a later `previous_response_id` continues. The stream's events are `shape.py`'s."""

from __future__ import annotations

import time
import uuid
from typing import Optional

import orjson

from ajet_proxy.dataplane.responses.protocol import ResponsesRequest
from ajet_proxy.dataplane.responses.types import (
    Conversation,
    FunctionCallItem,
    MessageItem,
    OutputItem,
    OutputLogprob,
    ResponseJson,
)
from ajet_proxy.dataplane.types import ChatMessage, ChatToolCall, ChoiceJson, ChoiceMessageJson, UsageCounts
from ajet_proxy.episode_history import LOGGED_INSTRUCTIONS


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def new_response_id() -> str:
    """A fresh Response id."""
    return _id("resp")


def message_item(text: str, logprobs: Optional[list[OutputLogprob]], status: str = "completed") -> MessageItem:
    """The assistant's text as an output message item."""
    return {
        "type": "message",
        "id": _id("msg"),
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}],
    }


def call_item(call: ChatToolCall, status: str = "completed") -> FunctionCallItem:
    """A chat tool call as a function_call output item."""
    fn = call.get("function") or {}
    return {
        "type": "function_call",
        "id": _id("fc"),
        "call_id": call.get("id") or _id("call"),
        "name": fn.get("name", ""),
        "arguments": fn.get("arguments", ""),
        "status": status,
    }


def output_logprobs(choice: ChoiceJson) -> list[OutputLogprob]:
    """Chat logprobs as output_text logprobs."""
    content = (choice.get("logprobs") or {}).get("content") or []
    return [
        {
            "token": c.get("token", ""),
            "logprob": c.get("logprob", 0.0),
            "bytes": c.get("bytes") or [],
            "top_logprobs": [
                {"token": t.get("token", ""), "logprob": t.get("logprob", 0.0), "bytes": t.get("bytes") or []}
                for t in c.get("top_logprobs") or []
            ],
        }
        for c in content
    ]


def response_object(
    rid: str,
    req: ResponsesRequest,
    output: list[OutputItem],
    usage: Optional[UsageCounts],
    finish_reason: Optional[str],
    status: Optional[str] = None,
) -> ResponseJson:
    """A Response (`protocol.ResponseObject`'s JSON): the output items, usage in Responses' terms, the request's
    settings echoed."""
    usage = usage or {}
    pt, ct = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    incomplete = finish_reason == "length"
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status or ("incomplete" if incomplete else "completed"),
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete and status is None else None,
        "error": None,
        "model": req.model or "policy",
        "output": output,
        "usage": {
            "input_tokens": pt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": ct,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": pt + ct,
        },
        "instructions": req.instructions,
        "tools": [t.model_dump(exclude_unset=True) for t in req.tools or ()],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id,
        "metadata": req.metadata or {},
        "text": req.text or {"format": {"type": "text"}},
        "truncation": req.truncation or "disabled",
        "store": True if req.store is None else req.store,
        "reasoning": None,
        "user": req.user,
    }


def logged_conversation(request: str, response: str) -> Conversation:
    """The conversation a logged Responses call leaves: its chat messages (less the instructions) and its
    answer, as `previous_response_id` continues it."""
    chat, answer = orjson.loads(request), orjson.loads(response)
    messages: Conversation = list(chat.get("messages") or [])
    if chat.get(LOGGED_INSTRUCTIONS):
        messages = messages[1:]
    return messages + [assistant_message((answer.get("choices") or [{}])[0])]


def assistant_message(choice: ChoiceJson) -> ChatMessage:
    """The chat message an answer adds to the conversation."""
    msg: ChoiceMessageJson = choice.get("message") or {}
    out: ChatMessage = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    return out

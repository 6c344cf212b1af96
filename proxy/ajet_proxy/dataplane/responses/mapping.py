"""OpenAI's Responses API (`POST /v1/responses`) on the chat-completions path.

A Responses request becomes one chat call (logged with ids and logprobs, trained like any other);
its chat answer is written back as a Response, plain or as the stream of events the openai SDK
parses. `previous_response_id` continues a conversation of the same episode: the proxy keeps each
response's conversation (its input and output as chat messages) with the live episode.

Why not LiteLLM's Responses<->chat transformation: measured in `bench/responses_mapping.py`, it costs
~20x this mapping per turn (0.76 ms against 0.04 ms for request + answer, about half the proxy's whole
CPU per call), and its streaming side consumes LiteLLM's own chunk objects, while the proxy relays the
engine's bytes. This module is the one mapping for both; `tests/proxy/test_responses_api.py` checks its
chat messages against LiteLLM's (they differ only where the policy's chat template needs it: `developer`
becomes `system`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Optional, Union

import orjson

from ajet_proxy.dataplane.mapping import bad_field, joined_text, set_extra, with_sampling, with_tools
from ajet_proxy.dataplane.responses.protocol import FunctionTool, ResponsesRequest
from ajet_proxy.dataplane.responses.types import FunctionCallItem, MessageItem, OutputItem, OutputLogprob, ResponseJson
from ajet_proxy.dataplane.types import (
    AnswerChoice,
    AnswerMessage,
    ChatBody,
    ChatMessage,
    ChatTool,
    ChatToolCall,
    FunctionSpec,
    JsonSchemaFormat,
    ResponseFormat,
    ToolChoice,
    UsageCounts,
)
from ajet_proxy.episode_history import LOGGED_INSTRUCTIONS

Conversation = list[ChatMessage]
"""Chat messages, without the instructions (a later response does not inherit them)."""

FIELD_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format"}
"""A chat field a Responses request became -> the Responses field a client would fix."""

_UNSUPPORTED = {
    "background": "background mode (the episode's calls are answered while it runs)",
    "conversation": "the Conversations API (use previous_response_id within the episode)",
    "prompt": "stored prompt templates",
}
_PART_TEXT = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
"""Content parts that carry text -> the key that holds it."""


# ---------------------------------------------------------------- request


def chat_request(req: ResponsesRequest, history: Conversation) -> tuple[ChatBody, Conversation]:
    """The chat body a Responses request makes, and the conversation so far (history + this input).
    `InvalidRequest` naming the field for what is malformed or unsupported."""
    for field, what in _UNSUPPORTED.items():
        if set_extra(req, field):
            raise bad_field(field, f"{what} is not supported by the AgentJet proxy")
    if req.reasoning and (req.reasoning.get("effort") or req.reasoning.get("summary")):
        raise bad_field("reasoning", "reasoning settings are not supported by the policy model")
    conversation = history + input_messages(req.input)
    system: list[ChatMessage] = [{"role": "system", "content": req.instructions}] if req.instructions else []
    chat: ChatBody = {"model": "policy" if req.model is None else req.model, "messages": system + conversation}
    _carry(chat, req)
    tools = None if req.tools is None else chat_tools(req.tools)
    with_tools(chat, tools, None if req.tool_choice is None else chat_tool_choice(req.tool_choice))
    fmt = response_format(req.text)
    if fmt is not None:
        chat["response_format"] = fmt
    if req.wants_logprobs():
        chat["logprobs"] = True
    return chat, conversation


def _carry(chat: ChatBody, req: ResponsesRequest) -> None:
    """The Responses fields chat has too, under chat's names (absent or null: left out)."""
    with_sampling(chat, req.temperature, req.top_p, req.stream)
    if req.max_output_tokens is not None:
        chat["max_tokens"] = req.max_output_tokens
    if req.top_logprobs is not None:
        chat["top_logprobs"] = req.top_logprobs


def input_messages(inp: Union[str, list[dict[str, object]]]) -> Conversation:
    """Responses input (a string, or message / function_call / function_call_output items) as chat messages."""
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    out: Conversation = []
    for i, item in enumerate(inp):
        where = f"input.{i}"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            _add_call(out, item, where)
        elif kind == "function_call_output":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": _str(item, "call_id", where),
                    "content": _text(item.get("output"), f"{where}.output"),
                }
            )
        else:
            raise bad_field(
                f"{where}.type",
                f"{kind!r} items are not supported (only message, function_call and "
                "function_call_output: built-in tools and item references need OpenAI's servers)",
            )
    return out


def _str(item: Mapping[str, object], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise bad_field(f"{where}.{key}", "required, a string")
    return value


def _text(content: Any, where: str) -> str:
    """Text content: a string, or a list of text parts (images, files and audio are refused)."""
    refused = "content is not supported: the policy takes text only (no image, file or audio input)"
    return joined_text(content, where, _PART_TEXT, "content parts", refused)


def _message(item: Mapping[str, object], where: str) -> ChatMessage:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise bad_field(f"{where}.role", "one of user, assistant, system, developer")
    return {
        "role": "system" if role == "developer" else role,
        "content": _text(item.get("content"), f"{where}.content"),
    }


def _add_call(out: Conversation, item: Mapping[str, object], where: str) -> None:
    """A function call joins the assistant turn before it (one turn may call several functions)."""
    call: ChatToolCall = {
        "id": _str(item, "call_id", where),
        "type": "function",
        "function": {"name": _str(item, "name", where), "arguments": _str(item, "arguments", where)},
    }
    if out and out[-1]["role"] == "assistant":
        out[-1] = {**out[-1], "tool_calls": [*(out[-1].get("tool_calls") or []), call]}
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_tools(tools: list[FunctionTool]) -> list[ChatTool]:
    """Function tools in chat's shape; any other kind (web_search, file_search, mcp, ...) is refused."""
    out: list[ChatTool] = []
    for i, tool in enumerate(tools):
        if tool.type != "function":
            raise bad_field(
                f"tools.{i}.type",
                f"built-in tool {tool.type!r} is not supported: only function tools (the agent runs its tools itself)",
            )
        if tool.name is None:
            raise bad_field(f"tools.{i}.name", "required, a string")
        fn: FunctionSpec = {"name": tool.name}
        if tool.description is not None:
            fn["description"] = tool.description
        if tool.parameters is not None:
            fn["parameters"] = tool.parameters
        if tool.strict is not None:
            fn["strict"] = tool.strict
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Union[str, dict[str, object]]) -> ToolChoice:
    """`auto` / `none` / `required`, or a named function, in chat's shape."""
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice
    name = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
    if isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise bad_field("tool_choice", "one of 'auto', 'none', 'required' or {'type': 'function', 'name': ...}")


def response_format(text: Optional[dict[str, object]]) -> Optional[ResponseFormat]:
    """`text.format` as chat's `response_format` (None for plain text)."""
    fmt = text.get("format") if text is not None else None
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": _json_schema(fmt)}
    raise bad_field("text.format.type", "one of text, json_object, json_schema")


def _json_schema(fmt: dict[str, object]) -> JsonSchemaFormat:
    """Responses' `json_schema` format (its fields at the top) as chat's `json_schema` object."""
    out: JsonSchemaFormat = {}
    name, schema, strict, description = (fmt.get(k) for k in ("name", "schema", "strict", "description"))
    if isinstance(name, str):
        out["name"] = name
    if isinstance(schema, dict):
        out["schema"] = schema
    if isinstance(strict, bool):
        out["strict"] = strict
    if isinstance(description, str):
        out["description"] = description
    for key, value in (("name", name), ("schema", schema), ("strict", strict), ("description", description)):
        if value is not None and key not in out:
            raise bad_field(
                f"text.format.{key}",
                "has the wrong type (name and description: strings; schema: an object; strict: a boolean)",
            )
    return out


# ---------------------------------------------------------------- answer


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


def output_logprobs(choice: AnswerChoice) -> list[OutputLogprob]:
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


def assistant_message(choice: AnswerChoice) -> ChatMessage:
    """The chat message an answer adds to the conversation."""
    msg: AnswerMessage = choice.get("message") or {}
    out: ChatMessage = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    return out

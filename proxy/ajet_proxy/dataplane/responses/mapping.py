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
from typing import Any, Optional

import orjson

from ajet_proxy.dataplane.mapping import bad_field, carried, joined_text, with_tools
from ajet_proxy.episode_history import LOGGED_INSTRUCTIONS

Conversation = list[dict[str, Any]]
"""Chat messages, without the instructions (a later response does not inherit them)."""

FIELD_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format"}
"""A chat field a Responses request became -> the Responses field a client would fix."""

_CARRIED = (
    ("max_output_tokens", "max_tokens"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("stream", "stream"),
    ("top_logprobs", "top_logprobs"),
)
"""Responses fields chat has too: (theirs, chat's)."""
_UNSUPPORTED = {
    "background": "background mode (the episode's calls are answered while it runs)",
    "conversation": "the Conversations API (use previous_response_id within the episode)",
    "prompt": "stored prompt templates",
}
_PART_TEXT = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
"""Content parts that carry text -> the key that holds it."""


# ---------------------------------------------------------------- request


def chat_request(body: dict[str, Any], history: Conversation) -> tuple[dict[str, Any], Conversation]:
    """The chat body a Responses request makes, and the conversation so far (history + this input).
    `InvalidRequest` naming the field for what is malformed or unsupported."""
    for field, what in _UNSUPPORTED.items():
        if body.get(field):
            raise bad_field(field, f"{what} is not supported by the AgentJet proxy")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and (reasoning.get("effort") or reasoning.get("summary")):
        raise bad_field("reasoning", "reasoning settings are not supported by the policy model")
    if "input" not in body:
        raise bad_field("input", "required (a string or a list of input items)")
    conversation = history + input_messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad_field("instructions", "must be a string")
    chat: dict[str, Any] = {
        "model": "policy" if body.get("model") is None else body["model"],
        "messages": ([{"role": "system", "content": instructions}] if instructions else []) + conversation,
        **carried(body, _CARRIED),
    }
    with_tools(chat, body, chat_tools, chat_tool_choice)
    fmt = response_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    if wants_logprobs(body):
        chat["logprobs"] = True
    return chat, conversation


def wants_logprobs(body: dict[str, Any]) -> bool:
    """Whether the client asked for the output text's logprobs (`include: ["message.output_text.logprobs"]`)."""
    include = body.get("include")
    return isinstance(include, list) and "message.output_text.logprobs" in include


def input_messages(inp: Any) -> Conversation:
    """Responses input (a string, or message / function_call / function_call_output items) as chat messages."""
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    if not isinstance(inp, list):
        raise bad_field("input", "must be a string or a list of input items")
    out: Conversation = []
    for i, item in enumerate(inp):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise bad_field(where, "each input item must be an object")
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


def _str(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise bad_field(f"{where}.{key}", "required, a string")
    return value


def _text(content: Any, where: str) -> str:
    """Text content: a string, or a list of text parts (images, files and audio are refused)."""
    refused = "content is not supported: the policy takes text only (no image, file or audio input)"
    return joined_text(content, where, _PART_TEXT, "content parts", refused)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise bad_field(f"{where}.role", "one of user, assistant, system, developer")
    return {
        "role": "system" if role == "developer" else role,
        "content": _text(item.get("content"), f"{where}.content"),
    }


def _add_call(out: Conversation, item: dict[str, Any], where: str) -> None:
    """A function call joins the assistant turn before it (one turn may call several functions)."""
    call = {
        "id": _str(item, "call_id", where),
        "type": "function",
        "function": {"name": _str(item, "name", where), "arguments": _str(item, "arguments", where)},
    }
    if out and out[-1]["role"] == "assistant":
        out[-1] = {**out[-1], "tool_calls": [*(out[-1].get("tool_calls") or []), call]}
    else:
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools in chat's shape; any other kind (web_search, file_search, mcp, ...) is refused."""
    if not isinstance(tools, list):
        raise bad_field("tools", "must be a list")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise bad_field(
                f"tools.{i}.type",
                f"built-in tool {kind!r} is not supported: only function tools (the agent runs its tools itself)",
            )
        fn = {"name": _str(tool, "name", f"tools.{i}")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                fn[key] = tool[key]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """`auto` / `none` / `required`, or a named function, in chat's shape."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_field("tool_choice", "one of 'auto', 'none', 'required' or {'type': 'function', 'name': ...}")


def response_format(text: Any) -> Optional[dict[str, Any]]:
    """`text.format` as chat's `response_format` (None for plain text)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt},
        }
    raise bad_field("text.format.type", "one of text, json_object, json_schema")


# ---------------------------------------------------------------- answer


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def new_response_id() -> str:
    """A fresh Response id."""
    return _id("resp")


def message_item(text: str, logprobs: Optional[list[dict[str, Any]]], status: str = "completed") -> dict[str, Any]:
    """The assistant's text as an output message item."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"type": "message", "id": _id("msg"), "status": status, "role": "assistant", "content": [part]}


def call_item(call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
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


def output_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
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
    body: dict[str, Any],
    output: list[dict[str, Any]],
    usage: Optional[dict[str, Any]],
    finish_reason: Optional[str],
    status: Optional[str] = None,
) -> dict[str, Any]:
    """A Response: the output items, usage in Responses' terms, the request's settings echoed."""
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
        "model": body.get("model") or "policy",
        "output": output,
        "usage": {
            "input_tokens": pt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": ct,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": pt + ct,
        },
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "metadata": body.get("metadata") or {},
        "text": body.get("text") or {"format": {"type": "text"}},
        "truncation": body.get("truncation") or "disabled",
        "store": body.get("store", True),
        "reasoning": None,
        "user": body.get("user"),
    }


def logged_conversation(request: str, response: str) -> Conversation:
    """The conversation a logged Responses call leaves: its chat messages (less the instructions) and its
    answer, as `previous_response_id` continues it."""
    chat, answer = orjson.loads(request), orjson.loads(response)
    messages = list(chat.get("messages") or [])
    if chat.get(LOGGED_INSTRUCTIONS):
        messages = messages[1:]
    return messages + [assistant_message((answer.get("choices") or [{}])[0])]


def assistant_message(choice: dict[str, Any]) -> dict[str, Any]:
    """The chat message an answer adds to the conversation."""
    msg = choice.get("message") or {}
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    return out

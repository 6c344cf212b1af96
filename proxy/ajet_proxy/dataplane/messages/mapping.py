"""Anthropic's Messages API (`POST /v1/messages`) on the chat-completions path.

Agents built on the anthropic SDK (and coding agents that speak it) train like any other: the request
becomes one chat call to the policy, logged with token ids and logprobs, and the chat answer is
written back as an Anthropic message: plain, or streamed as Anthropic's events while the tokens arrive
(`MessagesShape`). Tool calls keep their chat ids, so a `tool_result` finds its `tool_use`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from ajet_proxy.dataplane.mapping import bad_field, carried, joined_text, with_tools

FIELD_NAMES = {"stop": "stop_sequences", "tools": "tools", "messages": "messages"}
"""A chat field a Messages request became -> the Messages field a client would fix."""

_CARRIED = (
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("top_k", "top_k"),
    ("stream", "stream"),
    ("stop_sequences", "stop"),
)
"""Messages fields chat has too: (theirs, chat's)."""
_UNSUPPORTED = {"container": "code-execution containers", "mcp_servers": "remote MCP servers"}


# ---------------------------------------------------------------- request


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body a Messages request makes; `InvalidRequest` naming the field for what is malformed or
    not supported."""
    for field, what in _UNSUPPORTED.items():
        if body.get(field):
            raise bad_field(field, f"{what} are not supported by the AgentJet proxy")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        raise bad_field("thinking", "extended thinking is not supported by the policy model")
    if not isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_tokens"), bool):
        raise bad_field("max_tokens", "required, an integer")
    if body.get("stop_sequences") is not None and not isinstance(body["stop_sequences"], list):
        raise bad_field("stop_sequences", "must be a list of strings")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_field("messages", "required, a non-empty list of messages")
    chat: dict[str, Any] = {
        "model": "policy" if body.get("model") is None else body["model"],
        "max_tokens": body["max_tokens"],
        "messages": system_messages(body.get("system")) + chat_messages(messages),
        **carried(body, _CARRIED),
    }
    return with_tools(chat, body, chat_tools, chat_tool_choice)


def system_messages(system: Any) -> list[dict[str, Any]]:
    """`system` (a string or text blocks) as a leading system message."""
    if system is None or system == "" or system == []:
        return []
    return [{"role": "system", "content": _text_blocks(system, "system")}]


def _text_blocks(content: Any, where: str) -> str:
    refused = "blocks are not supported here: text only (no image or document input)"
    return joined_text(content, where, {"text": "text"}, "content blocks", refused)


def chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """User and assistant turns (text, tool_use and tool_result blocks) as chat messages."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad_field(f"{where}.role", "each message needs a role, user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            out += _assistant(content, where) if m["role"] == "assistant" else _user(content, where)
        else:
            raise bad_field(f"{where}.content", "must be a string or a list of content blocks")
    return out


def _blocks(content: list[Any], where: str, allowed: tuple[str, ...]) -> list[tuple[str, dict[str, Any], str]]:
    out = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            raise bad_field(
                f"{where}.content.{j}.type",
                f"{kind!r} blocks are not supported in this turn (supported: {', '.join(allowed)})",
            )
        out.append((kind, block, f"{where}.content.{j}"))
    return out


def _user(content: list[Any], where: str) -> list[dict[str, Any]]:
    """Tool results become tool messages (in order), the text a user message after them."""
    out, texts = [], []
    for kind, block, at in _blocks(content, where, ("text", "tool_result")):
        if kind == "text":
            texts.append(_text_blocks([block], at))
            continue
        if not isinstance(block.get("tool_use_id"), str):
            raise bad_field(f"{at}.tool_use_id", "required, a string")
        result = block.get("content")
        text = "" if result is None else _text_blocks(result, f"{at}.content")
        out.append(
            {
                "role": "tool",
                "tool_call_id": block["tool_use_id"],
                "content": f"Error: {text}" if block.get("is_error") else text,
            }
        )
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _assistant(content: list[Any], where: str) -> list[dict[str, Any]]:
    texts, calls = [], []
    for kind, block, at in _blocks(content, where, ("text", "tool_use")):
        if kind == "text":
            texts.append(_text_blocks([block], at))
            continue
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise bad_field(at, "a tool_use block needs an id and a name")
        calls.append(
            {
                "id": block["id"],
                "type": "function",
                "function": {"name": block["name"], "arguments": json.dumps(block.get("input") or {})},
            }
        )
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        msg["tool_calls"] = calls
    return [msg]


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Client tools (`name`, `description`, `input_schema`) in chat's shape; Anthropic's server tools are refused."""
    if not isinstance(tools, list):
        raise bad_field("tools", "must be a list")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad_field(
                f"tools.{i}.type",
                f"server tool {kind!r} is not supported: only client tools (name, description, input_schema)",
            )
        if not isinstance(tool.get("name"), str):
            raise bad_field(f"tools.{i}.name", "required, a string")
        fn: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if tool.get("description") is not None:
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """auto / any / none / a named tool, in chat's shape."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_field(
        "tool_choice", "one of {'type': 'auto'}, {'type': 'any'}, {'type': 'none'}, {'type': 'tool', 'name': ...}"
    )


# ---------------------------------------------------------------- answer


def new_message_id() -> str:
    """A fresh message id."""
    return f"msg_{uuid.uuid4().hex}"


def stop_reason(finish_reason: Optional[str], matched: Any) -> str:
    """Chat's finish reason (and vLLM's `stop_reason`, the stop string matched) in Anthropic's terms."""
    if finish_reason == "tool_calls":
        return "tool_use"
    if finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if isinstance(matched, str) else "end_turn"


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    """A chat tool call as a tool_use block (arguments that are not a JSON object are kept as `{"raw": ...}`)."""
    fn = call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = None
    return {
        "type": "tool_use",
        "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
        "name": fn.get("name", ""),
        "input": args if isinstance(args, dict) else {"raw": fn.get("arguments")},
    }


def message_object(
    mid: str,
    model: str,
    content: list[dict[str, Any]],
    finish_reason: Optional[str],
    matched: Any,
    usage: Optional[dict[str, Any]],
) -> dict[str, Any]:
    """An Anthropic message."""
    usage = usage or {}
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(finish_reason, matched),
        "stop_sequence": matched if isinstance(matched, str) else None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }

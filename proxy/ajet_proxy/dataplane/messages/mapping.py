"""Anthropic's Messages API (`POST /v1/messages`) on the chat-completions path.

Agents built on the anthropic SDK (and coding agents that speak it) train like any other: the request
becomes one chat call to the policy, logged with token ids and logprobs, and the chat answer is
written back as an Anthropic message: plain, or streamed as Anthropic's events while the tokens arrive
(`MessagesShape`). Tool calls keep their chat ids, so a `tool_result` finds its `tool_use`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Optional, Union

from ajet_proxy.dataplane.mapping import bad_field, joined_text, set_extra, with_sampling, with_tools
from ajet_proxy.dataplane.messages.protocol import CountTokensRequest, InputMessage, MessagesRequest, Tool
from ajet_proxy.dataplane.messages.types import ContentBlock, MessageJson, ToolUseBlock
from ajet_proxy.dataplane.types import (
    ChatBody,
    ChatMessage,
    ChatTool,
    ChatToolCall,
    FunctionSpec,
    ToolChoice,
    UsageCounts,
)

FIELD_NAMES = {"stop": "stop_sequences", "tools": "tools", "messages": "messages"}
"""A chat field a Messages request became -> the Messages field a client would fix."""

_UNSUPPORTED = {"container": "code-execution containers", "mcp_servers": "remote MCP servers"}


# ---------------------------------------------------------------- request


def chat_request(req: MessagesRequest) -> ChatBody:
    """The chat body a Messages request makes; `InvalidRequest` naming the field for what is malformed or
    not supported."""
    if req.thinking is not None and req.thinking.get("type") not in (None, "disabled"):
        raise bad_field("thinking", "extended thinking is not supported by the policy model")
    chat = with_sampling(conversation(req), req.temperature, req.top_p, req.stream)
    chat["max_tokens"] = req.max_tokens
    if req.top_k is not None:
        chat["top_k"] = req.top_k
    if req.stop_sequences is not None:
        chat["stop"] = req.stop_sequences
    return chat


def conversation(req: CountTokensRequest) -> ChatBody:
    """What a Messages (or count_tokens) request says the policy sees, as chat: the model name, the system prompt
    and messages, the tools and tool choice."""
    for field, what in _UNSUPPORTED.items():
        if set_extra(req, field):
            raise bad_field(field, f"{what} are not supported by the AgentJet proxy")
    chat: ChatBody = {
        "model": "policy" if req.model is None else req.model,
        "messages": system_messages(req.system) + chat_messages(req.messages),
    }
    tools = None if req.tools is None else chat_tools(req.tools)
    return with_tools(chat, tools, None if req.tool_choice is None else chat_tool_choice(req.tool_choice))


def system_messages(system: Union[str, list[dict[str, object]], None]) -> list[ChatMessage]:
    """`system` (a string or text blocks) as a leading system message."""
    if system is None or system == "" or system == []:
        return []
    return [{"role": "system", "content": _text_blocks(system, "system")}]


def _text_blocks(content: object, where: str) -> str:
    refused = "blocks are not supported here: text only (no image or document input)"
    return joined_text(content, where, {"text": "text"}, "content blocks", refused)


def chat_messages(messages: list[InputMessage]) -> list[ChatMessage]:
    """User and assistant turns (text, tool_use and tool_result blocks) as chat messages."""
    out: list[ChatMessage] = []
    for i, m in enumerate(messages):
        where = f"messages.{i}"
        if m.role not in ("user", "assistant"):
            raise bad_field(f"{where}.role", "each message needs a role, user or assistant")
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
        else:
            out += _assistant(m.content, where) if m.role == "assistant" else _user(m.content, where)
    return out


Block = Mapping[str, object]
"""A content block as the client sent it (its type checked, the rest read with a check each)."""


def _blocks(content: list[dict[str, object]], where: str, allowed: tuple[str, ...]) -> list[tuple[str, Block, str]]:
    out: list[tuple[str, Block, str]] = []
    for j, block in enumerate(content):
        kind = block.get("type")
        if not isinstance(kind, str) or kind not in allowed:
            raise bad_field(
                f"{where}.content.{j}.type",
                f"{kind!r} blocks are not supported in this turn (supported: {', '.join(allowed)})",
            )
        out.append((kind, block, f"{where}.content.{j}"))
    return out


def _user(content: list[dict[str, object]], where: str) -> list[ChatMessage]:
    """Tool results become tool messages (in order), the text a user message after them."""
    out: list[ChatMessage] = []
    texts = []
    for kind, block, at in _blocks(content, where, ("text", "tool_result")):
        if kind == "text":
            texts.append(_text_blocks([block], at))
            continue
        use_id = block.get("tool_use_id")
        if not isinstance(use_id, str):
            raise bad_field(f"{at}.tool_use_id", "required, a string")
        result = block.get("content")
        text = "" if result is None else _text_blocks(result, f"{at}.content")
        out.append(
            {"role": "tool", "tool_call_id": use_id, "content": f"Error: {text}" if block.get("is_error") else text}
        )
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _assistant(content: list[dict[str, object]], where: str) -> list[ChatMessage]:
    texts: list[str] = []
    calls: list[ChatToolCall] = []
    for kind, block, at in _blocks(content, where, ("text", "tool_use")):
        if kind == "text":
            texts.append(_text_blocks([block], at))
            continue
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise bad_field(at, "a tool_use block needs an id and a name")
        arguments = json.dumps(block.get("input") or {})
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    msg: ChatMessage = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        msg["tool_calls"] = calls
    return [msg]


def chat_tools(tools: list[Tool]) -> list[ChatTool]:
    """Client tools (`name`, `description`, `input_schema`) in chat's shape; Anthropic's server tools are refused."""
    out: list[ChatTool] = []
    for i, tool in enumerate(tools):
        if tool.type not in (None, "custom"):
            raise bad_field(
                f"tools.{i}.type",
                f"server tool {tool.type!r} is not supported: only client tools (name, description, input_schema)",
            )
        if tool.name is None:
            raise bad_field(f"tools.{i}.name", "required, a string")
        fn: FunctionSpec = {"name": tool.name, "parameters": tool.input_schema or {"type": "object"}}
        if tool.description is not None:
            fn["description"] = tool.description
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: dict[str, object]) -> ToolChoice:
    """auto / any / none / a named tool, in chat's shape."""
    kind, name = choice.get("type"), choice.get("name")
    if kind in ("auto", "none"):
        return str(kind)
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise bad_field(
        "tool_choice", "one of {'type': 'auto'}, {'type': 'any'}, {'type': 'none'}, {'type': 'tool', 'name': ...}"
    )


# ---------------------------------------------------------------- answer


def new_message_id() -> str:
    """A fresh message id."""
    return f"msg_{uuid.uuid4().hex}"


def stop_reason(finish_reason: Optional[str], matched: Union[int, str, None]) -> str:
    """Chat's finish reason (and vLLM's `stop_reason`, the stop string matched) in Anthropic's terms."""
    if finish_reason == "tool_calls":
        return "tool_use"
    if finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if isinstance(matched, str) else "end_turn"


def tool_use_block(call: ChatToolCall) -> ToolUseBlock:
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
    content: list[ContentBlock],
    finish_reason: Optional[str],
    matched: Union[int, str, None],
    usage: Optional[UsageCounts],
) -> MessageJson:
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

"""A Messages request's content blocks as chat messages: the system prompt, a user turn (text and tool results), an
assistant turn (text and tool uses), the tool choice. Its model keeps them as the client sent them
(`dict[str, object]`); each is read here with a check that names the field. `MessagesRequest.to_chat` puts them
together."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Union

from ajet_proxy.dataplane.mapping import bad_field, joined_text
from ajet_proxy.dataplane.types import ChatMessage, ChatToolCall, ToolChoice


def system_messages(system: Union[str, list[dict[str, object]], None]) -> list[ChatMessage]:
    """`system` (a string or text blocks) as a leading system message."""
    if system is None or system == "" or system == []:
        return []
    return [{"role": "system", "content": text_blocks(system, "system")}]


def text_blocks(content: object, where: str) -> str:
    """Text content: a string, or text blocks (an image or a document is refused, naming it)."""
    refused = "blocks are not supported here: text only (no image or document input)"
    return joined_text(content, where, {"text": "text"}, "content blocks", refused)


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


def user_turn(content: list[dict[str, object]], where: str) -> list[ChatMessage]:
    """Tool results become tool messages (in order), the text a user message after them."""
    out: list[ChatMessage] = []
    texts = []
    for kind, block, at in _blocks(content, where, ("text", "tool_result")):
        if kind == "text":
            texts.append(text_blocks([block], at))
            continue
        use_id = block.get("tool_use_id")
        if not isinstance(use_id, str):
            raise bad_field(f"{at}.tool_use_id", "required, a string")
        result = block.get("content")
        text = "" if result is None else text_blocks(result, f"{at}.content")
        out.append(
            {"role": "tool", "tool_call_id": use_id, "content": f"Error: {text}" if block.get("is_error") else text}
        )
    if texts or not out:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def assistant_turn(content: list[dict[str, object]], where: str) -> list[ChatMessage]:
    """Text and tool_use blocks as one assistant message (its tool calls keep their ids)."""
    texts: list[str] = []
    calls: list[ChatToolCall] = []
    for kind, block, at in _blocks(content, where, ("text", "tool_use")):
        if kind == "text":
            texts.append(text_blocks([block], at))
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

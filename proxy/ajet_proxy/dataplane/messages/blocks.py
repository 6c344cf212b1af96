"""A Messages request's content blocks as chat messages: the system prompt, a user turn (text and tool results), an
assistant turn (text and tool uses), the tool choice. Its model keeps them as the client sent them
(`JsonObject`); each is read here with a check that names the field. `MessagesRequest.to_chat` puts them
together."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Union

from ajet_proxy.dataplane.mapping import bad_field, image_part, joined_text, mixed_content
from ajet_proxy.dataplane.types import ChatMessage, ChatToolCall, ContentPart, ImagePart, JsonObject, ToolChoice


def system_messages(system: Union[str, list[JsonObject], None]) -> list[ChatMessage]:
    """`system` (a string or text blocks) as a leading system message."""
    if system is None or system == "" or system == []:
        return []
    return [{"role": "system", "content": text_blocks(system, "system")}]


def text_blocks(content: object, where: str) -> str:
    """Text content: a string, or text blocks (an image or a document is refused, naming it)."""
    refused = "blocks are not supported here: text only (no image or document input)"
    return joined_text(content, where, {"text": "text"}, "content blocks", refused)


def seen_blocks(content: object, where: str) -> Union[str, list[ContentPart]]:
    """A user turn's or a tool result's content: text and `image` blocks (a document is refused, naming it)."""
    refused = "blocks are not supported here: text and images only (no document input)"
    return mixed_content(content, where, {"text": "text"}, ("image", image_block), "content blocks", refused)


def image_block(block: Mapping[str, object], at: str) -> ImagePart:
    """An `image` block with a base64 source as chat's image part (a `url` source is refused: nothing here fetches)."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise bad_field(f"{at}.source", "required, an object")
    if source.get("type") != "base64":
        raise bad_field(f"{at}.source.type", "only base64 images are taken (nothing here fetches a url)")
    media, data = source.get("media_type"), source.get("data")
    if not isinstance(media, str) or not isinstance(data, str):
        raise bad_field(f"{at}.source", "needs media_type and data (base64), strings")
    return image_part(f"data:{media};base64,{data}", at, "source.data")


Block = Mapping[str, object]
"""A content block as the client sent it (its type checked, the rest read with a check each)."""


def _blocks(content: list[JsonObject], where: str, allowed: tuple[str, ...]) -> list[tuple[str, Block, str]]:
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


def user_turn(content: list[JsonObject], where: str) -> list[ChatMessage]:
    """Tool results become tool messages (in order), the text a user message after them."""
    out: list[ChatMessage] = []
    seen: list[ContentPart] = []
    for kind, block, at in _blocks(content, where, ("text", "image", "tool_result")):
        if kind == "text":
            seen.append({"type": "text", "text": text_blocks([block], at)})
        elif kind == "image":
            seen.append(image_block(block, at))
        else:
            out.append(_tool_result(block, at))
    if seen or not out:
        out.append({"role": "user", "content": _joined(seen)})
    return out


def _tool_result(block: Block, at: str) -> ChatMessage:
    """A tool_result block as a tool message (text, and images where it returned some)."""
    use_id = block.get("tool_use_id")
    if not isinstance(use_id, str):
        raise bad_field(f"{at}.tool_use_id", "required, a string")
    result = block.get("content")
    content = "" if result is None else seen_blocks(result, f"{at}.content")
    if block.get("is_error"):
        content = f"Error: {content}" if isinstance(content, str) else [{"type": "text", "text": "Error: "}, *content]
    return {"role": "tool", "tool_call_id": use_id, "content": content}


def _joined(parts: list[ContentPart]) -> Union[str, list[ContentPart]]:
    """Parts as a message's content: one text when they hold no image."""
    texts = [p.get("text") for p in parts]
    if all(isinstance(t, str) for t in texts):
        return "".join(t for t in texts if isinstance(t, str))
    return parts


def assistant_turn(content: list[JsonObject], where: str) -> list[ChatMessage]:
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


def chat_tool_choice(choice: JsonObject) -> ToolChoice:
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

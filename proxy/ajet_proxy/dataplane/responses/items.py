"""A Responses request's JSON parts as chat's: its input items, tool choice and text format, which its model keeps
as the client sent them (`JsonObject`) and which are read here, each with a check that names the field.
`ResponsesRequest.to_chat` puts them together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional, Union

from ajet_proxy.dataplane.mapping import bad_field, image_part, joined_text, mixed_content
from ajet_proxy.dataplane.responses.types import Conversation
from ajet_proxy.dataplane.types import (
    ChatMessage,
    ChatToolCall,
    ContentPart,
    ImagePart,
    JsonObject,
    JsonSchemaFormat,
    ResponseFormat,
    ToolChoice,
)

_PART_TEXT = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
"""Content parts that carry text -> the key that holds it."""


def input_messages(inp: Union[str, list[JsonObject]]) -> Conversation:
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
                    "content": _content(item.get("output"), f"{where}.output"),
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


def _text(content: object, where: str) -> str:
    """Text content: a string, or a list of text parts (images, files and audio are refused)."""
    refused = "content is not supported here: text only (no image, file or audio)"
    return joined_text(content, where, _PART_TEXT, "content parts", refused)


def _content(content: object, where: str) -> Union[str, list[ContentPart]]:
    """Input content: a string, or text parts and `input_image` parts (a file or audio part is refused)."""
    refused = "content is not supported: the policy takes text and images (no file or audio input)"
    return mixed_content(content, where, _PART_TEXT, ("input_image", _input_image), "content parts", refused)


def _input_image(part: Mapping[str, object], at: str) -> ImagePart:
    """An `input_image` part as chat's image part: its `image_url` a base64 data: URL (a `file_id` needs OpenAI's
    file store, and is refused)."""
    if part.get("image_url") is None and part.get("file_id") is not None:
        raise bad_field(f"{at}.file_id", "files are not stored here: send image_url as a base64 data: URL")
    return image_part(part.get("image_url"), at, "image_url")


def _message(item: Mapping[str, object], where: str) -> ChatMessage:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise bad_field(f"{where}.role", "one of user, assistant, system, developer")
    return {
        "role": "system" if role == "developer" else role,
        "content": _content(item.get("content"), f"{where}.content")
        if role == "user"
        else _text(item.get("content"), f"{where}.content"),
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


def chat_tool_choice(choice: Union[str, JsonObject]) -> ToolChoice:
    """`auto` / `none` / `required`, or a named function, in chat's shape."""
    if isinstance(choice, str) and choice in ("auto", "none", "required"):
        return choice
    name = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
    if isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise bad_field("tool_choice", "one of 'auto', 'none', 'required' or {'type': 'function', 'name': ...}")


def response_format(text: Optional[JsonObject]) -> Optional[ResponseFormat]:
    """`text.format` as chat's `response_format` (None for plain text)."""
    fmt = text.get("format") if text is not None else None
    if fmt is None or not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": _json_schema(fmt)}
    raise bad_field("text.format.type", "one of text, json_object, json_schema")


def _json_schema(fmt: JsonObject) -> JsonSchemaFormat:
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

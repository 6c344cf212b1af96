"""What every API's request mapping shares: reading the body, naming a bad field, text from content parts, the
fields and tools another API's request carries over to chat, and checking the chat body it became."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import orjson
from pydantic import BaseModel

from ajet.chat_request import ChatCompletionRequest, validate_chat
from ajet.errors import InvalidRequest
from ajet_proxy.dataplane.types import ChatBody, ChatTool, ToolChoice
from ajet_proxy.limits import InputLimits, check_chat_shape


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; `InvalidRequest` naming `body` otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"body: not valid JSON ({exc})", fields=["body"]) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("body: expected a JSON object", fields=["body"])
    return body


def set_extra(request: BaseModel, field: str) -> bool:
    """Whether the client set `field` (to something other than a false value), one its request model does not
    declare: what the proxy refuses by name."""
    return bool((request.model_extra or {}).get(field))


def bad_field(field: str, message: str) -> InvalidRequest:
    """A request refused for one field, named as the client wrote it."""
    return InvalidRequest(f"{field}: {message}", fields=[field])


def joined_text(content: Any, where: str, parts: Mapping[str, str], noun: str, refused: str) -> str:
    """Text content: a string, or a list of parts whose `type` is one of `parts` (type -> the key that holds its
    text), joined. Another part is refused naming it (`refused` says why, after its type); `noun` names the
    parts as the API does ("content parts", "content blocks")."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_field(where, f"must be a string or a list of {noun}")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in parts:  # a type may be any JSON value, a dict included
            raise bad_field(f"{where}.{j}.type", f"{kind!r} {refused}")
        key = parts[kind]
        value = part.get(key)
        if not isinstance(value, str):
            raise bad_field(f"{where}.{j}.{key}", "required, a string")
        texts.append(value)
    return "".join(texts)


def with_tools(chat: ChatBody, tools: Optional[list[ChatTool]], choice: Optional[ToolChoice]) -> ChatBody:
    """`chat` with the request's tools and tool choice, converted to chat's shape. A choice that forces no tool
    ("auto", "none") is dropped when no function tool is left (these APIs accept it alone; chat does not); one that
    forces a tool stays, and is refused by name."""
    if tools:
        chat["tools"] = tools
    if choice is not None and ("tools" in chat or choice not in ("auto", "none")):
        chat["tool_choice"] = choice
    return chat


def with_sampling(
    chat: ChatBody, temperature: Optional[float], top_p: Optional[float], stream: Optional[bool]
) -> ChatBody:
    """`chat` with the settings another API's request carries over under chat's own names (absent or null: left
    out)."""
    if temperature is not None:
        chat["temperature"] = temperature
    if top_p is not None:
        chat["top_p"] = top_p
    if stream is not None:
        chat["stream"] = stream
    return chat


def check_mapped_body(
    chat: ChatBody, limits: InputLimits, names: dict[str, str]
) -> tuple[ChatCompletionRequest, bytes]:
    """Check the chat body another API's request became (as a chat request is checked); a bad field is named as
    the client wrote it (`names`: chat field -> theirs). Returns the body validated, and as logged."""
    try:
        check_chat_shape(chat, limits)
        request = validate_chat(chat)
    except InvalidRequest as exc:
        ours = exc.param or "body"
        theirs = names.get(ours.split(".")[0], ours)
        raise InvalidRequest(exc.detail.replace(ours, theirs, 1), fields=[theirs]) from exc
    return request, orjson.dumps(chat)

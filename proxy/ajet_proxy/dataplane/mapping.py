"""What every API's request mapping shares: reading the body, naming a bad field, text from content parts, the
fields and tools another API's request carries over to chat, and checking the chat body it became."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Union

import orjson
from pydantic import BaseModel

from ajet.errors import InvalidRequest
from ajet_core.chat_request import ChatCompletionRequest, validate_chat
from ajet_core.images import image_part_problem
from ajet_proxy.dataplane.types import ChatBody, ChatTool, ContentPart, ImagePart, JsonObject, ToolChoice
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
    return "".join(part_text(part, f"{where}.{j}", parts, refused) for j, part in enumerate(content))


def part_text(part: Any, at: str, parts: Mapping[str, str], refused: str) -> str:
    """One text part's text (at the dotted path `at`), or `InvalidRequest` naming what is wrong with it."""
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(kind, str) or kind not in parts:  # a type may be any JSON value, a dict included
        raise bad_field(f"{at}.type", f"{kind!r} {refused}")
    key = parts[kind]
    value = part.get(key)
    if not isinstance(value, str):
        raise bad_field(f"{at}.{key}", "required, a string")
    return value


ImageReader = Callable[[Mapping[str, object], str], ImagePart]
"""Reads one of an API's image parts (the part, its dotted path) as chat's `image_url` part, naming a bad field."""


def mixed_content(
    content: Any, where: str, parts: Mapping[str, str], images: tuple[str, ImageReader], noun: str, refused: str
) -> Union[str, list[ContentPart]]:
    """Content of text and images: a string, or a list of text parts (as `joined_text`) and image parts (`images`:
    the API's image type and its reader). Without an image it is the joined text; with one, chat's parts in order."""
    kind_of_image, read = images
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") == kind_of_image
                                                 for p in content):  # fmt: skip
        return joined_text(content, where, parts, noun, refused)
    out: list[ContentPart] = []
    for j, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == kind_of_image:
            out.append(read(part, f"{where}.{j}"))
        else:
            out.append({"type": "text", "text": part_text(part, f"{where}.{j}", parts, refused)})
    return out


def image_part(url: object, at: str, url_field: str) -> ImagePart:
    """Chat's `image_url` part of another API's image (its URL at `at` + `url_field`), the shape checked and named
    as the client wrote it; where it came from rides along (`ajet_core.images.ORIGIN_KEY`) until the proxy decodes
    it."""
    part: JsonObject = {"type": "image_url", "image_url": {"url": url}}
    problem = image_part_problem(part)
    if problem is not None:
        raise bad_field(f"{at}.{url_field}", problem[1])
    return {"type": "image_url", "image_url": {"url": str(url)}, "ajet_field": f"{at}.{url_field}"}


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

"""Chat completions' wire: the request (`ajet_core.chat_request.ChatCompletionRequest`, which the embedded engine
validates with too), the answers the proxy passes on, and `/v1/models`' objects; each a typed model that validates
and describes itself (`ajet_proxy.api_docs`)."""

from __future__ import annotations

from typing import Literal, Optional

import orjson
from pydantic import BaseModel, ConfigDict

from ajet.errors import InvalidRequest
from ajet_core.chat_request import ChatCompletionRequest, validate_chat
from ajet_proxy.dataplane.mapping import parse_json_object
from ajet_proxy.dataplane.types import ChatToolCall, JsonObject
from ajet_proxy.limits import DEFAULT_LIMITS, InputLimits, check_chat_shape

__all__ = ["ChatCompletion", "ChatCompletionRequest", "ModelList", "ModelObject", "model_object", "parse_chat_body"]


class _Answer(BaseModel):
    """Base of what the proxy answers: more fields may come (the engine's own are passed on)."""

    model_config = ConfigDict(extra="allow")


class ChatCompletionMessage(_Answer):
    """The assistant's message."""

    role: Literal["assistant"]
    """Always `assistant`."""
    content: Optional[str] = None
    """Its text (None when it only calls tools)."""
    tool_calls: Optional[list[ChatToolCall]] = None
    """The tools it calls, parsed from what the model wrote."""


class Choice(_Answer):
    """One answer (there is one: `n` is 1)."""

    index: int
    """0."""
    message: ChatCompletionMessage
    """The answer."""
    finish_reason: Optional[str] = None
    """`stop`, `length` (a limit the client set), or `tool_calls`."""
    logprobs: Optional[JsonObject] = None
    """Each token's log-probability, when the client asked (`logprobs`)."""
    token_ids: Optional[list[int]] = None
    """The answer's token ids, when the client asked (`return_token_ids`)."""


class ChatCompletion(_Answer):
    """The answer of a plain chat-completions call (a streamed one is the same as `chat.completion.chunk` events,
    then `data: [DONE]`)."""

    id: str
    """The answer's id."""
    object: Literal["chat.completion"]
    """Always `chat.completion`."""
    created: int
    """Unix time."""
    model: str
    """The model the engine serves."""
    choices: list[Choice]
    """The one answer."""
    usage: Optional[dict[str, int]] = None
    """Prompt, completion and total tokens."""
    prompt_token_ids: Optional[list[int]] = None
    """The prompt's token ids, when the client asked (`return_token_ids`)."""
    policy_version: Optional[int] = None
    """The version of the weights that answered, when the client asked for ids."""


class ModelObject(_Answer):
    """A model an episode may name (every name reaches the policy)."""

    id: str
    """Its name."""
    object: Literal["model"]
    """Always `model`."""
    created: int
    """0."""
    owned_by: str
    """`ajet`."""


class ModelList(_Answer):
    """The answer of `GET /v1/models`."""

    object: Literal["list"]
    """Always `list`."""
    data: list[ModelObject]
    """`policy`, then each engine's model."""


def parse_chat_body(raw: bytes, limits: InputLimits = DEFAULT_LIMITS) -> ChatCompletionRequest:
    """The request body validated (`ChatCompletionRequest`, which keeps the body as sent); `InvalidRequest` naming the
    field when it is malformed or over a limit."""
    body = parse_json_object(raw)
    if "kv_transfer_params" in body:  # the engine would run its ids instead of the messages: the proxy's alone
        raise InvalidRequest.for_field(
            "kv_transfer_params", "set by the proxy only (it sends the episode's token history this way)"
        )
    check_chat_shape(body, limits)
    try:
        orjson.dumps(body)  # a lone surrogate (e.g. "\\udaa4") parses but cannot be sent on: refuse it here
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest.for_field("body", f"a string cannot be encoded as UTF-8 ({exc})") from exc
    return validate_chat(body)


def model_object(name: str) -> ModelObject:
    """One entry of `/v1/models`."""
    return ModelObject(id=name, object="model", created=0, owned_by="ajet")

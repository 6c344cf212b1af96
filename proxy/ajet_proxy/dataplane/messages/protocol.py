"""Anthropic's Messages API's wire (`POST /v1/messages`, `/v1/messages/count_tokens`): requests and answers, typed
models that validate and describe themselves (`ajet_proxy.api_docs`). Types are checked here, strictly; what the
policy cannot do (server tools, images, documents, extended thinking) is refused by `mapping.chat_request`, naming
the field. Errors are Anthropic's error objects."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ajet.chat_request import MaxTokens, Temperature, TopP, invalid_request
from ajet_proxy.dataplane.messages.types import ContentBlock, MessagesUsage


class _Wire(BaseModel):
    """Base of the Messages wire: strict types, other fields kept."""

    model_config = ConfigDict(strict=True, extra="allow")


class InputMessage(_Wire):
    """One message of the conversation."""

    role: str
    """`user` or `assistant`."""
    content: Union[str, list[dict[str, object]]]
    """Text, or content blocks: `text`, `tool_use` (assistant), `tool_result` (user)."""


class Tool(_Wire):
    """A client tool the model may call (server tools are refused, naming the tool)."""

    type: Optional[str] = None
    """`custom` or absent (a server tool's type, e.g. `web_search_20250305`, is refused)."""
    name: Optional[str] = None
    """The tool's name."""
    description: Optional[str] = None
    """What it does."""
    input_schema: Optional[dict[str, object]] = None
    """Its input's JSON schema."""


class CountTokensRequest(_Wire):
    """Body of `POST /v1/messages/count_tokens`: a conversation to count, as a Messages request has it."""

    messages: list[InputMessage] = Field(min_length=1)
    """The conversation."""
    model: Optional[str] = None
    """Any name: the policy's tokenizer counts."""
    system: Union[str, list[dict[str, object]], None] = None
    """The system prompt: text, or text blocks."""
    tools: Optional[list[Tool]] = None
    """Client tools (their definitions count too)."""
    tool_choice: Optional[dict[str, object]] = None
    """`{"type": "auto" | "any" | "tool" | "none", ...}`."""


class MessagesRequest(CountTokensRequest):
    """Body of `POST /v1/messages`: one call of the policy."""

    max_tokens: MaxTokens
    """Most tokens of the answer (required)."""
    stream: Optional[bool] = None
    """Stream the answer as Anthropic's events."""
    temperature: Optional[Temperature] = None
    """Sampling temperature in [0, 2] (Anthropic's is [0, 1]; the policy takes OpenAI's range)."""
    top_p: Optional[TopP] = None
    """Nucleus sampling mass in (0, 1]."""
    top_k: Optional[int] = None
    """Sample from the k most likely tokens."""
    stop_sequences: Optional[list[str]] = None
    """Strings that end the answer."""
    thinking: Optional[dict[str, object]] = None
    """Extended thinking settings (refused unless disabled: the policy has none)."""
    metadata: Optional[dict[str, object]] = None
    """Anthropic's request metadata."""


def messages_request(body: object) -> MessagesRequest:
    """A Messages body as its model; `InvalidRequest` naming the first bad field."""
    try:
        return MessagesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None


def count_request(body: object) -> CountTokensRequest:
    """A count_tokens body as its model; `InvalidRequest` naming the first bad field."""
    try:
        return CountTokensRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None


class MessageObject(BaseModel):
    """An Anthropic message: the answer of a plain call (a streamed one is Anthropic's events)."""

    model_config = ConfigDict(extra="allow")

    id: str
    """The message's id (`msg_...`)."""
    type: Literal["message"]
    """Always `message`."""
    role: Literal["assistant"]
    """Always `assistant`."""
    model: str
    """The model name the request gave."""
    content: list[ContentBlock]
    """`text` and `tool_use` blocks."""
    stop_reason: Optional[str] = None
    """`end_turn`, `max_tokens` (a limit the client set), `stop_sequence` or `tool_use`."""
    usage: MessagesUsage
    """Input and output tokens."""


class TokenCount(BaseModel):
    """The answer of `POST /v1/messages/count_tokens`."""

    input_tokens: int
    """The request's tokens, rendered by the policy's chat template and tokenizer."""

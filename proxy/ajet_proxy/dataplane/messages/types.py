"""What the Messages API answers, typed: an Anthropic message, its content blocks and usage.

`TypedDict`s, as the chat side's (`ajet_proxy.dataplane.types`, which says why): built by the shape, sent as JSON."""

from __future__ import annotations

from typing import Literal, Optional, Union

from typing_extensions import TypedDict

from ajet_proxy.dataplane.types import JsonObject


class TextBlock(TypedDict):
    """An Anthropic text block."""

    type: Literal["text"]
    """Always `text`."""
    text: str
    """The text."""


class ToolUseBlock(TypedDict):
    """An Anthropic tool_use block."""

    type: Literal["tool_use"]
    """Always `tool_use`."""
    id: str
    """The call's id (a chat call's own), which a later `tool_result` names."""
    name: str
    """The tool."""
    input: JsonObject
    """Its input: the arguments the model wrote, parsed (`{"raw": text}` when they are not a JSON object)."""


ContentBlock = Union[TextBlock, ToolUseBlock]
"""A block of an Anthropic message's content."""


class MessagesUsage(TypedDict):
    """An Anthropic message's token counts."""

    input_tokens: int
    """The prompt's tokens."""
    output_tokens: int
    """The answer's tokens."""
    cache_creation_input_tokens: int
    """0: the engines cache no prompt for Anthropic's accounting."""
    cache_read_input_tokens: int
    """0, likewise."""


class MessageJson(TypedDict):
    """An Anthropic message: a plain call's answer, and the `message` of a stream's `message_start`."""

    id: str
    """`msg_...`."""
    type: Literal["message"]
    """Always `message`."""
    role: Literal["assistant"]
    """Always `assistant`."""
    model: str
    """The model name the request gave."""
    content: list[ContentBlock]
    """Text and tool_use blocks (empty at a stream's start)."""
    stop_reason: Optional[str]
    """`end_turn`, `max_tokens`, `stop_sequence` or `tool_use` (None at a stream's start)."""
    stop_sequence: Optional[str]
    """The stop string matched, when one ended it."""
    usage: MessagesUsage
    """Token counts."""

"""What the Responses API answers, typed: a Response, its output items and usage; and the conversation a response
continues.

`TypedDict`s, as the chat side's (`ajet_proxy.dataplane.types`, which says why): built by the shape, sent as JSON."""

from __future__ import annotations

from typing import Literal, Optional, Union

from typing_extensions import TypedDict

from ajet_proxy.dataplane.types import ChatMessage, JsonObject

Conversation = list[ChatMessage]
"""A response's conversation as chat messages, without the instructions (a later response does not inherit them)."""


class TopOutputLogprob(TypedDict):
    """An alternative of an output token."""

    token: str
    """Its text."""
    logprob: float
    """Its log-probability."""
    bytes: list[int]
    """Its UTF-8 bytes."""


class OutputLogprob(TopOutputLogprob):
    """An output text token's log-probability, with its alternatives."""

    top_logprobs: list[TopOutputLogprob]
    """The most likely alternatives, when asked."""


class OutputText(TypedDict):
    """The text part of a Response's message item."""

    type: Literal["output_text"]
    """Always `output_text`."""
    text: str
    """The text (grows while it streams)."""
    annotations: list[object]
    """Always empty: the policy cites nothing."""
    logprobs: list[OutputLogprob]
    """Its tokens' log-probabilities, when asked."""


class MessageItem(TypedDict):
    """A Response's output message."""

    type: Literal["message"]
    """Always `message`."""
    id: str
    """The item's id (`msg_...`)."""
    status: str
    """`completed`, or `in_progress` while it streams."""
    role: Literal["assistant"]
    """Always `assistant`."""
    content: list[OutputText]
    """Its one text part."""


class FunctionCallItem(TypedDict):
    """A Response's function call."""

    type: Literal["function_call"]
    """Always `function_call`."""
    id: str
    """The item's id (`fc_...`)."""
    call_id: str
    """The call's id, which a later `function_call_output` names."""
    name: str
    """The function."""
    arguments: str
    """Its arguments as the model wrote them (grows while it streams)."""
    status: str
    """`completed`, or `in_progress` while it streams."""


OutputItem = Union[MessageItem, FunctionCallItem]
"""An item of a Response's output."""


class ResponsesUsage(TypedDict):
    """A Response's token counts."""

    input_tokens: int
    """The prompt's tokens."""
    input_tokens_details: dict[str, int]
    """`cached_tokens`: 0 (the engines report none)."""
    output_tokens: int
    """The answer's tokens."""
    output_tokens_details: dict[str, int]
    """`reasoning_tokens`: 0 (the policy has no separate reasoning)."""
    total_tokens: int
    """Both."""


class ResponseJson(TypedDict):
    """A Response: its output, its usage, and the request's settings echoed as OpenAI's server echoes them."""

    id: str
    """`resp_...`, which a later `previous_response_id` names."""
    object: Literal["response"]
    """Always `response`."""
    created_at: int
    """Unix time."""
    status: str
    """`completed`, `incomplete` (a token limit the client set) or `in_progress` (a stream's first events)."""
    incomplete_details: Optional[dict[str, str]]
    """`{"reason": "max_output_tokens"}` when incomplete."""
    error: None
    """Always None: a failed call is an error answer, not a Response."""
    model: str
    """The model name the request gave."""
    output: list[OutputItem]
    """The message item and function call items."""
    usage: ResponsesUsage
    """Token counts."""
    instructions: Optional[str]
    """Echoed."""
    tools: list[JsonObject]
    """Echoed as sent."""
    tool_choice: Union[str, JsonObject]
    """Echoed (`auto` when absent)."""
    parallel_tool_calls: bool
    """Echoed (True when absent)."""
    temperature: Optional[float]
    """Echoed."""
    top_p: Optional[float]
    """Echoed."""
    max_output_tokens: Optional[int]
    """Echoed."""
    previous_response_id: Optional[str]
    """Echoed."""
    metadata: JsonObject
    """Echoed."""
    text: JsonObject
    """Echoed (`{"format": {"type": "text"}}` when absent)."""
    truncation: str
    """Echoed (`disabled` when absent)."""
    store: bool
    """Echoed (True when absent)."""
    reasoning: None
    """Always None: the policy has no reasoning settings."""
    user: Optional[str]
    """Echoed."""

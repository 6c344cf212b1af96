"""The Responses API's wire (`POST /v1/responses`): its request and its answer, typed models that validate and
describe themselves (`ajet_proxy.api_docs`). The request's types are checked here, strictly; what the policy cannot
do (built-in tools, files, background mode) is refused by `mapping.chat_request`, naming the field."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from ajet.chat_request import MaxTokens, Temperature, TopLogprobs, TopP, invalid_request
from ajet_proxy.dataplane.responses.types import ResponsesUsage


class _Wire(BaseModel):
    """Base of the Responses wire: strict types, other fields kept."""

    model_config = ConfigDict(strict=True, extra="allow")


class FunctionTool(_Wire):
    """A function the model may call (the only kind of tool the proxy serves: the agent runs its tools itself)."""

    type: str
    """`function` (built-in tools such as `web_search` are refused, naming the tool)."""
    name: Optional[str] = None
    """The function's name."""
    description: Optional[str] = None
    """What it does."""
    parameters: Optional[dict[str, object]] = None
    """Its arguments' JSON schema."""
    strict: Optional[bool] = None
    """Whether the arguments must follow the schema exactly."""


class ResponsesRequest(_Wire):
    """Body of `POST /v1/responses`: one call of the policy, which `previous_response_id` continues."""

    input: Union[str, list[dict[str, object]]]
    """A user message, or input items: `message`, `function_call`, `function_call_output`."""
    model: Optional[str] = None
    """Any name: the proxy routes every call to the policy."""
    instructions: Optional[str] = None
    """A system message for this call only (a later response does not inherit it)."""
    previous_response_id: Optional[str] = None
    """A response of this episode whose conversation this call continues."""
    stream: Optional[bool] = None
    """Stream the answer as Responses events."""
    max_output_tokens: Optional[MaxTokens] = None
    """Most tokens of the answer."""
    temperature: Optional[Temperature] = None
    """Sampling temperature in [0, 2]."""
    top_p: Optional[TopP] = None
    """Nucleus sampling mass in (0, 1]."""
    top_logprobs: Optional[TopLogprobs] = None
    """Alternatives per token, with `include: ["message.output_text.logprobs"]`."""
    tools: Optional[list[FunctionTool]] = None
    """Function tools the model may call."""
    tool_choice: Union[str, dict[str, object], None] = None
    """`auto`, `none`, `required`, or `{"type": "function", "name": ...}`."""
    parallel_tool_calls: Optional[bool] = None
    """Whether several tools may be called in one turn."""
    text: Optional[dict[str, object]] = None
    """`{"format": ...}`: text, `json_object` or `json_schema`."""
    include: Optional[list[str]] = None
    """Extra output: `message.output_text.logprobs`."""
    reasoning: Optional[dict[str, object]] = None
    """Reasoning settings (refused: the policy has none)."""
    metadata: Optional[dict[str, object]] = None
    """Echoed in the answer."""
    user: Optional[str] = None
    """The end user's id."""
    truncation: Optional[str] = None
    """`disabled` or `auto`, echoed (the proxy never truncates: a prompt over the job's limit is refused)."""
    store: Optional[bool] = None
    """Echoed: the episode's calls are always logged, and `previous_response_id` works within the episode."""

    def wants_logprobs(self) -> bool:
        """Whether the client asked for the output text's logprobs (`include: ["message.output_text.logprobs"]`)."""
        return self.include is not None and "message.output_text.logprobs" in self.include


def validate_responses(body: object) -> ResponsesRequest:
    """The body as a `ResponsesRequest`; `InvalidRequest` naming the first bad field."""
    try:
        return ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None


class OutputItem(BaseModel):
    """An item of a Response's output: a `message` (its text) or a `function_call`."""

    model_config = ConfigDict(extra="allow")

    type: Literal["message", "function_call"]
    """What the item is."""
    id: str
    """The item's id."""
    status: str
    """`completed` (or `in_progress` while it streams)."""


class ResponseObject(BaseModel):
    """A Response: the answer of a plain call, and the last event of a streamed one."""

    model_config = ConfigDict(extra="allow")

    id: str
    """The response's id (`resp_...`), which a later `previous_response_id` names."""
    object: Literal["response"]
    """Always `response`."""
    created_at: int
    """Unix time."""
    status: str
    """`completed`, or `incomplete` at a token limit the client set."""
    model: str
    """The model name the request gave."""
    output: list[OutputItem]
    """The answer: a message item, function call items."""
    usage: ResponsesUsage
    """Input, output and total tokens."""

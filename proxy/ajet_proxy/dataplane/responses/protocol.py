"""The Responses API's wire (`POST /v1/responses`): its request and its answer, typed models that validate and
describe themselves (`ajet_proxy.api_docs`). The request's types are checked here, strictly, and the request
becomes one chat call (`ResponsesRequest.to_chat`, logged with ids and logprobs, trained like any other); what the
policy cannot do (built-in tools, files, background mode) is refused there, naming the field. The chat answer is
written back as a Response (`answer.py`), plain or as the stream of events the openai SDK parses (`shape.py`).
`previous_response_id` continues a conversation of the same episode: the proxy keeps each response's conversation
(its input and output as chat messages) with the live episode.

Why not LiteLLM's Responses<->chat transformation: measured in `bench/responses_mapping.py`, it costs ~20x this
mapping per turn (0.76 ms against 0.04 ms for request + answer, about half the proxy's whole CPU per call), and its
streaming side consumes LiteLLM's own chunk objects, while the proxy relays the engine's bytes.
`tests/proxy/dataplane/responses/test_responses_api.py` checks the chat messages against LiteLLM's (they differ
only where the policy's chat template needs it: `developer` becomes `system`).
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from ajet_core.chat_request import MaxTokens, Temperature, TopLogprobs, TopP, invalid_request
from ajet_proxy.dataplane.mapping import bad_field, set_extra, with_sampling, with_tools
from ajet_proxy.dataplane.responses.items import chat_tool_choice, input_messages, response_format
from ajet_proxy.dataplane.responses.types import Conversation, ResponsesUsage
from ajet_proxy.dataplane.types import ChatBody, ChatMessage, ChatTool, FunctionSpec, JsonObject

FIELD_NAMES = {"messages": "input", "max_tokens": "max_output_tokens", "response_format": "text.format"}
"""A chat field a Responses request became -> the Responses field a client would fix."""

_UNSUPPORTED = {
    "background": "background mode (the episode's calls are answered while it runs)",
    "conversation": "the Conversations API (use previous_response_id within the episode)",
    "prompt": "stored prompt templates",
}


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
    parameters: Optional[JsonObject] = None
    """Its arguments' JSON schema."""
    strict: Optional[bool] = None
    """Whether the arguments must follow the schema exactly."""

    def to_chat(self, i: int) -> ChatTool:
        """This tool, `tools[i]`, in chat's shape; any other kind (web_search, file_search, mcp, ...) is refused."""
        if self.type != "function":
            raise bad_field(
                f"tools.{i}.type",
                f"built-in tool {self.type!r} is not supported: only function tools (the agent runs its tools itself)",
            )
        if self.name is None:
            raise bad_field(f"tools.{i}.name", "required, a string")
        fn: FunctionSpec = {"name": self.name}
        if self.description is not None:
            fn["description"] = self.description
        if self.parameters is not None:
            fn["parameters"] = self.parameters
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}


class ResponsesRequest(_Wire):
    """Body of `POST /v1/responses`: one call of the policy, which `previous_response_id` continues."""

    input: Union[str, list[JsonObject]]
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
    tool_choice: Union[str, JsonObject, None] = None
    """`auto`, `none`, `required`, or `{"type": "function", "name": ...}`."""
    parallel_tool_calls: Optional[bool] = None
    """Whether several tools may be called in one turn."""
    text: Optional[JsonObject] = None
    """`{"format": ...}`: text, `json_object` or `json_schema`."""
    include: Optional[list[str]] = None
    """Extra output: `message.output_text.logprobs`."""
    reasoning: Optional[JsonObject] = None
    """Reasoning settings (refused: the policy has none)."""
    metadata: Optional[JsonObject] = None
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

    def to_chat(self, history: Conversation) -> tuple[ChatBody, Conversation]:
        """The chat body this request makes, and the conversation so far (`history` + this input).
        `InvalidRequest` naming the field for what is malformed or unsupported."""
        for field, what in _UNSUPPORTED.items():
            if set_extra(self, field):
                raise bad_field(field, f"{what} is not supported by the AgentJet proxy")
        if self.reasoning and (self.reasoning.get("effort") or self.reasoning.get("summary")):
            raise bad_field("reasoning", "reasoning settings are not supported by the policy model")
        conversation = history + input_messages(self.input)
        system: list[ChatMessage] = [{"role": "system", "content": self.instructions}] if self.instructions else []
        chat: ChatBody = {"model": "policy" if self.model is None else self.model, "messages": system + conversation}
        self._carry(chat)
        tools = None if self.tools is None else [tool.to_chat(i) for i, tool in enumerate(self.tools)]
        with_tools(chat, tools, None if self.tool_choice is None else chat_tool_choice(self.tool_choice))
        fmt = response_format(self.text)
        if fmt is not None:
            chat["response_format"] = fmt
        if self.wants_logprobs():
            chat["logprobs"] = True
        return chat, conversation

    def _carry(self, chat: ChatBody) -> None:
        """The Responses fields chat has too, under chat's names (absent or null: left out)."""
        with_sampling(chat, self.temperature, self.top_p, self.stream)
        if self.max_output_tokens is not None:
            chat["max_tokens"] = self.max_output_tokens
        if self.top_logprobs is not None:
            chat["top_logprobs"] = self.top_logprobs


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

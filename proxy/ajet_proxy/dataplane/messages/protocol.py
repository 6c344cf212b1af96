"""Anthropic's Messages API's wire (`POST /v1/messages`, `/v1/messages/count_tokens`): requests and answers, typed
models that validate and describe themselves (`ajet_proxy.api_docs`). Types are checked here, strictly.

Agents built on the anthropic SDK (and coding agents that speak it) train like any other: the request becomes one
chat call to the policy (`MessagesRequest.to_chat`), logged with token ids and logprobs; what the policy cannot do
(server tools, images, documents, extended thinking) is refused there, naming the field. The chat answer is written
back as an Anthropic message (`answer.py`): plain, or streamed as Anthropic's events while the tokens arrive
(`shape.py`). Tool calls keep their chat ids, so a `tool_result` finds its `tool_use`. Errors are Anthropic's error
objects."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ajet_core.chat_request import MaxTokens, Temperature, TopP, invalid_request
from ajet_proxy.dataplane.mapping import bad_field, set_extra, with_sampling, with_tools
from ajet_proxy.dataplane.messages.blocks import assistant_turn, chat_tool_choice, system_messages, user_turn
from ajet_proxy.dataplane.messages.types import ContentBlock, MessagesUsage
from ajet_proxy.dataplane.types import ChatBody, ChatMessage, ChatTool, FunctionSpec, JsonObject

FIELD_NAMES = {"stop": "stop_sequences", "tools": "tools", "messages": "messages"}
"""A chat field a Messages request became -> the Messages field a client would fix."""

_UNSUPPORTED = {"container": "code-execution containers", "mcp_servers": "remote MCP servers"}


class _Wire(BaseModel):
    """Base of the Messages wire: strict types, other fields kept."""

    model_config = ConfigDict(strict=True, extra="allow")


class InputMessage(_Wire):
    """One message of the conversation."""

    role: str
    """`user` or `assistant`."""
    content: Union[str, list[JsonObject]]
    """Text, or content blocks: `text`, `tool_use` (assistant), `tool_result` (user)."""

    def to_chat(self, i: int) -> list[ChatMessage]:
        """This message, `messages[i]`, as chat messages (a user turn's tool results are tool messages)."""
        where = f"messages.{i}"
        if self.role not in ("user", "assistant"):
            raise bad_field(f"{where}.role", "each message needs a role, user or assistant")
        if isinstance(self.content, str):
            return [{"role": self.role, "content": self.content}]
        return assistant_turn(self.content, where) if self.role == "assistant" else user_turn(self.content, where)


class Tool(_Wire):
    """A client tool the model may call (server tools are refused, naming the tool)."""

    type: Optional[str] = None
    """`custom` or absent (a server tool's type, e.g. `web_search_20250305`, is refused)."""
    name: Optional[str] = None
    """The tool's name."""
    description: Optional[str] = None
    """What it does."""
    input_schema: Optional[JsonObject] = None
    """Its input's JSON schema."""

    def to_chat(self, i: int) -> ChatTool:
        """This tool, `tools[i]`, in chat's shape; Anthropic's server tools are refused."""
        if self.type not in (None, "custom"):
            raise bad_field(
                f"tools.{i}.type",
                f"server tool {self.type!r} is not supported: only client tools (name, description, input_schema)",
            )
        if self.name is None:
            raise bad_field(f"tools.{i}.name", "required, a string")
        fn: FunctionSpec = {"name": self.name, "parameters": self.input_schema or {"type": "object"}}
        if self.description is not None:
            fn["description"] = self.description
        return {"type": "function", "function": fn}


class CountTokensRequest(_Wire):
    """Body of `POST /v1/messages/count_tokens`: a conversation to count, as a Messages request has it."""

    messages: list[InputMessage] = Field(min_length=1)
    """The conversation."""
    model: Optional[str] = None
    """Any name: the policy's tokenizer counts."""
    system: Union[str, list[JsonObject], None] = None
    """The system prompt: text, or text blocks."""
    tools: Optional[list[Tool]] = None
    """Client tools (their definitions count too)."""
    tool_choice: Optional[JsonObject] = None
    """`{"type": "auto" | "any" | "tool" | "none", ...}`."""

    def conversation(self) -> ChatBody:
        """What the policy sees, as chat: the model name, the system prompt and messages, the tools and tool choice
        (what a count counts, and what a Messages call sends before its sampling settings)."""
        for field, what in _UNSUPPORTED.items():
            if set_extra(self, field):
                raise bad_field(field, f"{what} are not supported by the AgentJet proxy")
        messages = system_messages(self.system) + [c for i, m in enumerate(self.messages) for c in m.to_chat(i)]
        chat: ChatBody = {"model": "policy" if self.model is None else self.model, "messages": messages}
        tools = None if self.tools is None else [tool.to_chat(i) for i, tool in enumerate(self.tools)]
        return with_tools(chat, tools, None if self.tool_choice is None else chat_tool_choice(self.tool_choice))


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
    thinking: Optional[JsonObject] = None
    """Extended thinking settings (refused unless disabled: the policy has none)."""
    metadata: Optional[JsonObject] = None
    """Anthropic's request metadata."""

    def to_chat(self) -> ChatBody:
        """The chat body this request makes; `InvalidRequest` naming the field for what is malformed or not
        supported."""
        if self.thinking is not None and self.thinking.get("type") not in (None, "disabled"):
            raise bad_field("thinking", "extended thinking is not supported by the policy model")
        chat = with_sampling(self.conversation(), self.temperature, self.top_p, self.stream)
        chat["max_tokens"] = self.max_tokens
        if self.top_k is not None:
            chat["top_k"] = self.top_k
        if self.stop_sequences is not None:
            chat["stop"] = self.stop_sequences
        return chat


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

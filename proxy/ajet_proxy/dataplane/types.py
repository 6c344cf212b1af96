"""The data plane's chat JSON, typed: the chat body the proxy sends an engine, and the answers and stream events it
reads back (what the Responses and Messages APIs answer in their own shapes: `responses/types.py`,
`messages/types.py`).

These are `TypedDict`s, not models: the proxy forwards the bodies it parsed (a client's vendor fields reach the
engine intact, `ajet_core.chat_request`), and an answer is relayed event by event, one per token, where building a model
per event would be the proxy's largest cost. The types say which keys a body has and what each holds, for the type
checker and the reader; validation is `ajet_core.chat_request.ChatCompletionRequest`'s (a request) and
`ajet_core.engine_answer.EngineAnswer`'s (an engine's answer). Every key is optional (`total=False`) unless the proxy
always writes it. JSON the proxy passes on without reading it (a tool's JSON schema, a client's metadata) or has yet
to check (a client's input items) is a `JsonObject`: nothing may be read from it unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Optional, Union

from typing_extensions import NotRequired, TypeAlias, TypedDict

from ajet_core.engine_answer import TokenLogprob

JsonObject: TypeAlias = dict[str, object]
"""A JSON object kept as it came: what the proxy passes on without reading it (a tool's JSON schema, a client's
metadata or template arguments, a tool call's parsed arguments), or has yet to check field by field (another API's
input item or content block, read where its error can name the field). Its values are `object`: nothing may be read
from one unchecked."""

# ---------------------------------------------------------------- the chat body sent to an engine


class ChatFunction(TypedDict, total=False):
    """What a chat tool call calls."""

    name: str
    """The function's name (a stream's first delta of a call carries it, later ones leave it out)."""
    arguments: str
    """The arguments as the JSON text the model wrote (a stream's deltas carry it piece by piece)."""


class ChatToolCall(TypedDict, total=False):
    """A tool call of an assistant message, or a stream delta of one."""

    id: Optional[str]
    """The call's id, which its tool result names (`tool_call_id`)."""
    type: str
    """`function`."""
    function: ChatFunction
    """What it calls."""
    index: int
    """In a stream's delta: which of the turn's calls the piece belongs to."""


class TextPart(TypedDict):
    """A text content part."""

    type: Literal["text"]
    text: str
    """The text."""
    ajet_field: NotRequired[str]
    """Never set on text: present so that every content part reads alike (`ImagePart.ajet_field`)."""


class ImageUrlJson(TypedDict):
    """Where an image part's image is."""

    url: str
    """A base64 `data:` URL (`ajet_core.images`)."""


class ImagePart(TypedDict):
    """An image content part (what the Responses and Messages APIs' images convert to)."""

    type: Literal["image_url"]
    image_url: ImageUrlJson
    """The image."""
    ajet_field: NotRequired[str]
    """Where it came from in another API's request (`ajet_core.images.ORIGIN_KEY`), until the proxy decodes it."""


ContentPart = Union[TextPart, ImagePart]
"""A content part chat's messages carry: text or an image."""


class ChatMessage(TypedDict, total=False):
    """A message of a chat conversation."""

    role: str
    """system, user, assistant or tool (Responses' `developer` is mapped to system)."""
    content: Union[str, list[ContentPart], None]
    """Its text, or text and image parts (None for an assistant turn that only calls tools)."""
    tool_calls: list[ChatToolCall]
    """The tools an assistant turn called."""
    tool_call_id: str
    """The call a tool message answers."""
    name: str
    """A participant's or a tool's name."""


class FunctionSpec(TypedDict, total=False):
    """A function the model may call, in chat's shape."""

    name: str
    """The function's name."""
    description: str
    """What it does."""
    parameters: JsonObject
    """Its arguments' JSON schema (passed on unread: the chat template reads it)."""
    strict: bool
    """Whether the arguments must follow the schema exactly."""


class ChatTool(TypedDict):
    """A tool of a chat request."""

    type: str
    """`function`."""
    function: FunctionSpec
    """The function."""


class NamedFunction(TypedDict):
    """The function a tool choice forces."""

    name: str
    """Its name."""


class NamedToolChoice(TypedDict):
    """A tool choice that forces one function."""

    type: str
    """`function`."""
    function: NamedFunction
    """The function forced."""


ToolChoice = Union[str, NamedToolChoice]
"""`auto`, `none`, `required`, or one named function."""


class JsonSchemaFormat(TypedDict, total=False):
    """Structured output by a JSON schema."""

    name: str
    """The schema's name."""
    schema: JsonObject
    """The schema itself (passed on unread)."""
    strict: bool
    """Whether the output must follow it exactly."""
    description: str
    """What the output is."""


class ResponseFormat(TypedDict, total=False):
    """Chat's `response_format`."""

    type: str
    """`json_object` or `json_schema` (plain text sends none)."""
    json_schema: JsonSchemaFormat
    """The schema, for `json_schema`."""


class KvTransfer(TypedDict):
    """How the proxy sends an episode's token prompt: the engine runs these ids instead of rendering the messages."""

    prompt_token_ids: list[int]
    """The prompt's ids (`ajet_token_history.planner`)."""


class ChatBody(TypedDict, total=False):
    """A chat-completions body: a client's (validated by `ChatCompletionRequest`, its other fields passed on as
    sent), or the one another API's request became (`ResponsesRequest.to_chat`, `MessagesRequest.to_chat`)."""

    model: str
    """The name the client gave (the engine's own model is put in as it is sent, `engine_body`)."""
    messages: list[ChatMessage]
    """The conversation."""
    max_tokens: int
    """Most tokens of the answer."""
    max_completion_tokens: int
    """The same, by its newer name (it wins)."""
    temperature: float
    """Sampling temperature."""
    top_p: float
    """Nucleus sampling mass."""
    top_k: int
    """The k most likely tokens (Messages' `top_k`; the vLLM engine honours it)."""
    stop: Union[str, list[str]]
    """Strings that end the answer."""
    stream: bool
    """Stream the answer as server-sent events."""
    tools: list[ChatTool]
    """Function tools the model may call."""
    tool_choice: ToolChoice
    """Whether, and which, tool must be called."""
    response_format: ResponseFormat
    """Structured output."""
    logprobs: bool
    """Return each token's log-probability (the proxy always asks the engine)."""
    top_logprobs: int
    """Alternatives per token."""
    return_token_ids: bool
    """Return the prompt's and the answer's ids (the proxy always asks the engine)."""
    kv_transfer_params: KvTransfer
    """The episode's token prompt; set by the proxy only."""
    chat_template: str
    """A chat template of the call's own, which the engine renders the messages with."""
    chat_template_kwargs: JsonObject
    """Values the template reads (`enable_thinking`, ...), passed on unread."""


class TemplateFields(TypedDict, total=False):
    """The fields of a call that change how the chat template renders."""

    chat_template: str
    """The call's own template."""
    chat_template_kwargs: JsonObject
    """Values the template reads."""


class TokenizeBody(TemplateFields, total=False):
    """A body of an engine's `POST /tokenize` (vLLM's, and the embedded engine's of the same shape)."""

    messages: Sequence[Mapping[str, object]]
    """A conversation to render with the chat template (or `prompt`)."""
    add_generation_prompt: bool
    """Whether the rendering ends with the assistant's turn opened (True unless told)."""
    tools: Sequence[Mapping[str, object]]
    """The tools the template sees."""
    prompt: str
    """A text to tokenize as it is (instead of `messages`)."""


# ---------------------------------------------------------------- what an engine answers


class ChoiceLogprobsJson(TypedDict, total=False):
    """A choice's (or a stream event's) `logprobs`."""

    content: Optional[list[TokenLogprob]]
    """One entry per token, in order."""


class ChoiceMessageJson(TypedDict, total=False):
    """A plain answer's message, or a stream event's `delta` (a piece of it)."""

    role: str
    """`assistant` (a stream's first delta)."""
    content: Optional[str]
    """The text (a stream's delta: the next piece of it)."""
    tool_calls: list[ChatToolCall]
    """The tool calls (a stream's delta: pieces of them, by `index`)."""


class ChoiceJson(TypedDict, total=False):
    """A choice of a plain answer or of a stream event."""

    index: int
    """0 (the proxy asks for one choice)."""
    message: ChoiceMessageJson
    """A plain answer's message."""
    delta: ChoiceMessageJson
    """A stream event's piece of the message."""
    finish_reason: Optional[str]
    """Why the answer ended (`stop`, `length`, `tool_calls`), on its last event."""
    stop_reason: Union[int, str, None]
    """vLLM's: the stop string (or token id) that ended it."""
    logprobs: Optional[ChoiceLogprobsJson]
    """Its tokens' log-probabilities."""
    token_ids: Optional[list[int]]
    """Its (or the event's) completion ids."""
    prompt_token_ids: Optional[list[int]]
    """The prompt's ids, where an engine puts them per choice."""


class UsageCounts(TypedDict, total=False):
    """Chat's token counts."""

    prompt_tokens: int
    """The prompt's tokens."""
    completion_tokens: int
    """The answer's tokens."""
    total_tokens: int
    """Both."""


class EngineError(TypedDict, total=False):
    """An OpenAI error object, as an engine answers one (or a stream's error event carries it)."""

    message: str
    """What went wrong."""
    type: str
    """Its kind."""
    code: Union[str, int, None]
    """Its code."""


class AnswerJson(TypedDict, total=False):
    """A plain chat answer, or one event of a streamed one, as the engine sent it (read through, trimmed in place,
    passed on)."""

    id: str
    """The answer's id."""
    object: str
    """`chat.completion`, or `chat.completion.chunk`."""
    created: int
    """Unix time."""
    model: str
    """The engine's model."""
    choices: list[ChoiceJson]
    """The one choice."""
    usage: Optional[UsageCounts]
    """Token counts (a stream's last event, when asked)."""
    prompt_token_ids: Optional[list[int]]
    """The prompt's ids (a stream's first event)."""
    policy_version: Optional[int]
    """The version that started the answer (the embedded engine's)."""
    policy_version_spans: Optional[list[list[int]]]
    """`[offset, version]` pairs when an update came mid-answer (`ajet_core.engine_answer.VersionSpans`)."""
    image_grids: Optional[list[list[int]]]
    """Each prompt image's grid (beside `prompt_token_ids`: a stream's first event)."""
    error: Union[EngineError, str]
    """An engine's error (then the rest is absent)."""

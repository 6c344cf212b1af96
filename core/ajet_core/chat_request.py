"""The chat-completions request the swarm reads or forwards, as a typed model that validates a body and describes it.

Both the proxy (before a call gets a number) and the embedded engine (before a request joins a batch) validate
every chat body with `ChatCompletionRequest` (`validate_chat`); a bad value is `InvalidRequest` naming the field as a
dotted path, answered 400. A request that passes cannot fail another agent's request in the engine's batch: every
sampling value is of its type (strictly: `1` is not `true`, `"1"` is not `1`), finite and in range. Fields not
declared here pass through unchecked, as OpenAI's API keeps growing; `None` is the same as absent. The model is
never used to rebuild the body: the proxy forwards the body it parsed, so vendor fields reach the engine intact; it
carries the validated request beside it (`ajet_proxy.dataplane.call.InFlightCall.request`) and reads the request's
settings from the model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional, Union, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ajet.errors import InvalidRequest
from ajet_core.images import IMAGE_PARTS, ImagePart, image_part_problem

MAX_STOP_STRINGS = 16
"""Most stop strings one request may carry."""
MAX_STOP_CHARS = 1024
"""Longest stop string."""
MAX_TOP_LOGPROBS = 20
"""Largest `top_logprobs` (OpenAI's bound)."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""Seeds are 64-bit signed integers, as in vLLM."""
MAX_TOKENS_RANGE = (1, 2**31 - 1)
"""`max_tokens` / `max_completion_tokens`: at least one token (the engine's own cap applies below this)."""
TEMPERATURE_RANGE = (0.0, 2.0)
"""OpenAI's temperature bounds."""
TOP_P_RANGE = (0.0, 1.0)
"""`top_p` lies in (0, 1]: the lower end is excluded."""
PENALTY_RANGE = (-2.0, 2.0)
"""OpenAI's presence / frequency penalty bounds."""
Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
ROLES = get_args(Role)
"""Message roles OpenAI's API knows."""
TEXT_PARTS = ("text",)
"""Content part types that carry text."""
CONTENT_PARTS = TEXT_PARTS + IMAGE_PARTS
"""Content part types the engines read: text, and images as base64 `data:` URLs (`ajet_core.images`); an audio or file
part is refused, never dropped, and so is an image sent to a model that takes none (by the engine)."""


class FieldProblem(ValueError):
    """A validator's finding about a part of its field (`path`: dotted, below the field; "" for the field itself)."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


def _within(lo: float, hi: float, lo_open: bool = False) -> AfterValidator:
    def check(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be a finite number")
        if v < lo or v > hi or (lo_open and v == lo):
            raise ValueError(f"must be in {'(' if lo_open else '['}{lo}, {hi}]")
        return v

    return AfterValidator(check)


def _stop(v: Any) -> Any:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ValueError("must be a string or a list of strings")
    if len(items) > MAX_STOP_STRINGS:
        raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are accepted")
    if any(not s or len(s) > MAX_STOP_CHARS for s in items):
        raise ValueError(f"each stop string must have 1 to {MAX_STOP_CHARS} characters")
    return v


def _content(v: Any) -> Any:
    """A message's content: text, or a list of text and image parts, or None; a part of another kind is refused by
    name, and so is an image URL that is not a base64 `data:` URL (its pixels are checked apart: `ajet_core.images`)."""
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise ValueError("must be a string or a list of content parts")
    for j, part in enumerate(v):
        if not isinstance(part, dict):
            raise ValueError("each content part must be an object")
        kind = part.get("type")
        if kind not in CONTENT_PARTS:
            why = f"{kind!r} parts are not supported: the policy takes text and images (no audio or file)"
            raise FieldProblem(f"{j}.type", why)
        if kind == "text" and not isinstance(part.get("text"), str):
            raise FieldProblem(f"{j}.text", "required, a string")
        problem = image_part_problem(part) if kind == "image_url" else None
        if problem is not None:
            raise FieldProblem(f"{j}.{problem[0]}", problem[1])
    return v


def _n(v: Any) -> Any:
    if v is not None and (type(v) is not int or v != 1):
        raise ValueError("only n=1 is supported in training episodes (run n episodes instead)")
    return v


def _tool_choice(v: Any) -> Any:
    if isinstance(v, str) and v not in ("none", "auto", "required"):
        raise ValueError("must be 'none', 'auto', 'required' or an object")
    if v is not None and not isinstance(v, (str, dict)):
        raise ValueError("must be a string or an object")
    return v


Temperature = Annotated[float, _within(*TEMPERATURE_RANGE)]
TopP = Annotated[float, _within(*TOP_P_RANGE, lo_open=True)]
Penalty = Annotated[float, _within(*PENALTY_RANGE)]
MaxTokens = Annotated[int, _within(*MAX_TOKENS_RANGE)]
Seed = Annotated[int, _within(*SEED_RANGE)]
TopLogprobs = Annotated[int, _within(0, MAX_TOP_LOGPROBS)]
Stop = Annotated[Union[str, list[str]], BeforeValidator(_stop)]
Content = Annotated[Union[str, list[Union["TextPart", "ImagePart"]], None], BeforeValidator(_content)]


class _Part(BaseModel):
    """Base of what a request nests: strict, other fields kept."""

    model_config = ConfigDict(strict=True, extra="allow")


class TextPart(_Part):
    """A text content part."""

    type: Literal["text"]
    """Always `text`."""
    text: str
    """The text."""


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A JSON escape of a UTF-16 surrogate (`\\ud800`): text that parses into a lone surrogate when unpaired."""


def _arguments(v: str) -> str:
    """Tool-call arguments the engines can render: the template reads them parsed, so JSON whose strings hold a lone
    surrogate (`"\\ud800"`, valid ASCII text) would fail the engine's tokenizer; it is refused here instead."""
    if not _ESCAPED_SURROGATE.search(v):
        return v
    try:
        parsed = json.loads(v)
    except ValueError:  # not JSON: the template gets the text as it is
        return v
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone UTF-16 surrogate escape (e.g. \\ud800) that cannot be encoded") from None
    return v


class FunctionCall(_Part):
    """What a tool call calls."""

    name: str
    """The function's name."""
    arguments: Annotated[str, AfterValidator(_arguments)]
    """Its arguments, as the JSON text the model wrote (refused when they parse into a lone surrogate)."""


class ToolCall(_Part):
    """One tool call of an assistant turn."""

    function: FunctionCall
    """The function called."""
    id: Optional[str] = None
    """The call's id, which its tool result names (`tool_call_id`)."""
    type: Optional[Literal["function"]] = None
    """`function` (the only kind)."""


class ChatMessage(_Part):
    """One message of a conversation."""

    role: Role
    """Who speaks: system, developer, user, assistant, tool (a tool's result) or function (the legacy result)."""
    content: Content = None
    """Its text, or text parts (None for an assistant turn that only calls tools)."""
    name: Optional[str] = None
    """A participant's or a tool's name."""
    tool_call_id: Optional[str] = None
    """The tool call a tool message answers."""
    tool_calls: Optional[list[ToolCall]] = None
    """The tools an assistant turn called."""


class ChatCompletionRequest(_Part):
    """Body of `POST /v1/chat/completions`: the fields the swarm reads or forwards, checked; any other passes."""

    messages: list[ChatMessage] = Field(min_length=1)
    """The conversation so far (at least one message)."""
    model: Optional[str] = None
    """Any name: the proxy routes every call to the policy."""
    stream: Optional[bool] = None
    """Stream the answer as server-sent events."""
    stream_options: Optional[dict[str, Any]] = None
    """Stream options (`include_usage`)."""
    n: Annotated[Optional[Literal[1]], BeforeValidator(_n)] = None
    """Only 1: an episode's answer is one sample (run n episodes for n samples)."""
    max_tokens: Optional[MaxTokens] = None
    """Most tokens of the answer (the job's per-turn cap applies below it)."""
    max_completion_tokens: Optional[MaxTokens] = None
    """The same, by its newer name (it wins over `max_tokens`)."""
    min_tokens: Optional[Annotated[int, Field(ge=0)]] = None
    """vLLM's: no end of turn or stop string before this many answer tokens (benchmarks use it to fix lengths)."""
    temperature: Optional[Temperature] = None
    """Sampling temperature in [0, 2] (0: greedy); the job's when absent."""
    top_p: Optional[TopP] = None
    """Nucleus sampling mass in (0, 1]."""
    presence_penalty: Optional[Penalty] = None
    """OpenAI's presence penalty in [-2, 2]."""
    frequency_penalty: Optional[Penalty] = None
    """OpenAI's frequency penalty in [-2, 2]."""
    seed: Optional[Seed] = None
    """A 64-bit seed: the same seed gives the same answer, streamed or not, batched or alone."""
    stop: Optional[Stop] = None
    """A stop string or up to 16 of them (1 to 1024 characters each)."""
    logprobs: Optional[bool] = None
    """Return each answer token's log-probability."""
    top_logprobs: Optional[TopLogprobs] = None
    """How many most likely alternatives to return per token (0 to 20)."""
    tools: Optional[list[dict[str, Any]]] = None
    """Function tools the model may call."""
    tool_choice: Annotated[
        Union[Literal["none", "auto", "required"], dict[str, Any], None], BeforeValidator(_tool_choice)
    ] = None
    """Whether (and which) tool must be called; only with `tools`."""
    parallel_tool_calls: Optional[bool] = None
    """Whether several tools may be called in one turn."""
    response_format: Optional[dict[str, Any]] = None
    """Structured output: `json_object` or `json_schema`."""
    user: Optional[str] = None
    """The end user's id (kept in the call log)."""
    return_token_ids: Optional[bool] = None
    """Return the prompt's and the answer's token ids (as vLLM does)."""

    _sent: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def sent(self) -> dict[str, Any]:
        """The body as the client sent it, which this request validated (`validate_chat`): what a server forwards,
        vendor fields intact, so only the validated request travels and the body is a view of it."""
        return self._sent

    @model_validator(mode="after")
    def _choice_needs_tools(self) -> "ChatCompletionRequest":
        if self.tool_choice is not None and not self.tools:
            raise ValueError("tool_choice: is only allowed when tools are specified")
        return self

    # The conversions a server makes of a request, as methods (vLLM's `to_sampling_params` style). Each is the module
    # function of the same rule over this request's fields, which the embedded engine and the token history apply to
    # raw bodies (a logged call read back) too: one rule, two ways in.

    def template_tools(self) -> Optional[list[Any]]:
        """The tools the chat template sees and the answer is parsed for calls with (`template_tools`)."""
        return template_tools(self.__dict__)

    def tokens_asked(self) -> Optional[int]:
        """The answer length the client asked for (`max_tokens_asked`)."""
        return max_tokens_asked(self.__dict__)

    def cut_by_server(self, finish_reason: Optional[str], completion_tokens: int) -> bool:
        """Whether an answer that ended by length was cut by the server's limit, not the client's (`cut_by_server`)."""
        return cut_by_server(self.__dict__, finish_reason, completion_tokens)


_MESSAGES = TypeAdapter(Annotated[list[ChatMessage], Field(min_length=1)])


def validate_messages(messages: Any) -> None:
    """`InvalidRequest` unless `messages` is a non-empty list of messages (what `/tokenize` renders)."""
    try:
        _MESSAGES.validate_python(messages)
    except ValidationError as exc:
        raise invalid_request(exc, within="messages") from None


def validate_chat(body: Mapping[str, Any]) -> ChatCompletionRequest:
    """The body as a `ChatCompletionRequest` (which keeps it: `sent`); `InvalidRequest` naming its first field with a
    wrong type or value."""
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc) from None
    request._sent = body if isinstance(body, dict) else dict(body)
    return request


_TYPE_NAMES = {
    "bool_type": "must be a boolean",
    "int_type": "must be an integer",
    "float_type": "must be a finite number",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "missing": "required",
    "too_short": "a non-empty list is required",
}


def invalid_request(exc: ValidationError, within: str = "") -> InvalidRequest:
    """A pydantic error as the `InvalidRequest` of its first field: the field's dotted path (union members left out;
    under `within`, for a part of a body) and what is wrong with it, said once."""
    err = exc.errors()[0]
    loc = [within] if within else []
    loc += [str(p) for p in err["loc"] if not _union_member(p)]
    field = ".".join(loc) or "body"
    if err["type"] == "value_error":
        problem = err["ctx"]["error"]
        message = str(problem)
        if isinstance(problem, FieldProblem):
            field, message = ".".join(p for p in (field, problem.path) if p), problem.message
        elif message.startswith("tool_choice: "):
            field, message = message.split(": ", 1)
    elif err["type"] == "literal_error":
        message = f"must be {err['ctx']['expected']}"
    else:
        message = _TYPE_NAMES.get(err["type"], str(err["msg"]))
    return InvalidRequest.for_field(field, message)


def _union_member(part: object) -> bool:
    """Whether a location step names a union's member (`str`, `list[TextPart]`, `function-after[...]`)."""
    return isinstance(part, str) and (
        part in ("str", "int", "float", "bool", "dict[str,any]", "TextPart", "ImagePart") or "[" in part
    )


# ---------------------------------------------------------------- reading a chat request


def content_text(content: Any) -> str:
    """A message's text as a chat template reads it: a string as it is, text parts joined, nothing else ("")."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def template_tools(body: Mapping[str, Any]) -> Optional[list[Any]]:
    """The tools a chat request's template sees, and its answer is parsed for calls with (None when it has none,
    or `tool_choice` is "none"). The proxy's token history renders new messages by this same rule as the engine
    renders whole prompts, or their tokens would not line up."""
    tools = body.get("tools")
    return tools if tools and body.get("tool_choice") != "none" else None


def max_tokens_asked(body: Mapping[str, Any]) -> Optional[int]:
    """The answer length a chat request's client asked for (`max_completion_tokens`, else `max_tokens`; None when it
    set neither). The server's own limits may cut an answer shorter; see `cut_by_server`."""
    asked = body.get("max_completion_tokens")
    return body.get("max_tokens") if asked is None else asked


def cut_by_server(body: Mapping[str, Any], finish_reason: Optional[str], completion_tokens: int) -> bool:
    """Whether an answer ended by length was cut by the server's limit (the job's per-turn cap, the model's
    context), not by one the client set: it asked for none, or for more than it got."""
    if finish_reason != "length":
        return False
    asked = max_tokens_asked(body)
    return asked is None or completion_tokens < asked


def prompt_over_job(tokens: int, max_prompt: int) -> str:
    """Why a prompt over the job's `max_prompt_length` is refused (the engine's and the proxy's one message)."""
    return (
        f"messages: the prompt is {tokens} tokens; this job trains prompts of at most {max_prompt} tokens "
        "(AgentJetJob.max_prompt_length): end the episode, compact the history, or raise the limit"
    )

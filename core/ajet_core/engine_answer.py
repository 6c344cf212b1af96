"""An engine's answer to a chat completion, as both engines send it to the proxy: vLLM's format, typed once.

vLLM with `return_token_ids: true` adds `prompt_token_ids` (top level) and `token_ids` (per choice) to OpenAI's chat
completion; `logprobs: true` adds `choices[i].logprobs.content[j].logprob`. Both engines add `policy_version_spans`
when a weight update came mid-answer (the embedded engine natively, vLLM through `vllm/versioned_server.py`). The
embedded engine builds an `EngineAnswer` and sends its dump; the proxy parses either engine's answer into one and
reads it, and a stream's chunks are assembled into one (`ajet_proxy.dataplane.tokens`). Fields an engine adds that
are not named here are kept (`extra="allow"`): they are the engine's and go on to the client.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

from ajet_core.chat_request import FieldProblem

VersionSpans = list[tuple[int, int]]
"""Which policy version sampled which tokens of an answer: `[(offset, version), ...]`, offsets into its completion
ids, ascending from 0; each span runs to the next one's offset (the last to the end)."""


class EngineModel(BaseModel):
    """Base of the engine-answer models: extra fields kept, so a body read and dumped again loses nothing."""

    model_config = ConfigDict(extra="allow")


class TopLogprob(TypedDict):
    """One of a token's most likely alternatives. (The per-token entries are typed dicts, not models, and only their
    `logprob` is checked: an answer has one per token, `ChoiceLogprobs`.)"""

    token: NotRequired[str]
    logprob: float
    bytes: NotRequired[Optional[list[int]]]


class TokenLogprob(TopLogprob):
    """One sampled token's entry of `logprobs.content`: its text, its log-probability under the policy that sampled
    it, and its alternatives when `top_logprobs` was asked."""

    top_logprobs: NotRequired[list[TopLogprob]]


def _logprob_entries(content: Optional[list[Any]]) -> Optional[list[Any]]:
    """A choice's per-token entries with each `logprob` checked (what training reads); the rest of an entry (its
    text, bytes, alternatives: what the client reads) is passed on unread. Validating each entry whole costs the
    proxy most of an answer's validation (an entry per token)."""
    if content is None:
        return None
    for i, item in enumerate(content):
        if not isinstance(item, dict):
            raise FieldProblem(str(i), "must be an object with a `logprob`")
        value = item.get("logprob")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FieldProblem(f"{i}.logprob", "must be a number")
    return content


class ChoiceLogprobs(EngineModel):
    """A choice's `logprobs`: one entry per completion token, in order (each a `TokenLogprob`)."""

    content: Annotated[Optional[list[Any]], AfterValidator(_logprob_entries)] = None

    def values(self) -> Optional[list[float]]:
        """Each completion token's log-probability, in order (None when the engine sent none)."""
        return None if self.content is None else [float(item["logprob"]) for item in self.content]


class FunctionCall(EngineModel):
    """A tool call's function: its name and its arguments as the model wrote them (a JSON text)."""

    name: str = ""
    arguments: str = ""


class ToolCall(EngineModel):
    """A tool call the engine parsed out of the answer's text."""

    id: Optional[str] = None
    type: str = "function"
    function: FunctionCall = Field(default_factory=FunctionCall)


class AnswerMessage(EngineModel):
    """The assistant message of a choice."""

    role: str = "assistant"
    content: Optional[str] = None
    """The answer's text, tool-call markup taken out; None when the answer is only tool calls."""
    tool_calls: Optional[list[ToolCall]] = None
    """None (or absent) when the answer calls no tool."""

    def tool_call_dicts(self) -> list[dict[str, Any]]:
        """The tool calls as the client got them: each as the engine sent it, fields it left out left out."""
        return [call.model_dump(exclude_unset=True) for call in self.tool_calls or ()]


class Usage(EngineModel):
    """Token counts of the call."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt: int, completion: int) -> Usage:
        """The counts of a prompt of `prompt` tokens and a completion of `completion`."""
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


class AnswerChoice(EngineModel):
    """One choice of an answer (the proxy asks for one: `n` is 1)."""

    index: int = 0
    message: AnswerMessage = Field(default_factory=AnswerMessage)
    finish_reason: Optional[str] = None
    """`stop`, `length` (a token limit cut it), `tool_calls`, or an engine's own."""
    stop_reason: Optional[Union[int, str]] = None
    """vLLM's: the stop string (or token id) that ended the answer; None for end-of-sequence or a length cut."""
    logprobs: Optional[ChoiceLogprobs] = None
    token_ids: Optional[list[int]] = None
    """The completion's token ids as sampled (never re-tokenised text)."""
    prompt_token_ids: Optional[list[int]] = None
    """Where an engine puts the prompt's ids per choice instead of at the top level."""


class EngineAnswer(EngineModel):
    """A non-streamed chat completion in vLLM's format; its readers name what the call log keeps of choice 0."""

    id: str = ""
    object: str = "chat.completion"
    created: int = 0
    model: str = ""
    choices: list[AnswerChoice] = Field(default_factory=list)
    usage: Optional[Usage] = None
    prompt_token_ids: Optional[list[int]] = None
    """The prompt's token ids, as the engine tokenised (or was sent) them."""
    policy_version: Optional[int] = None
    """The policy version that started the answer (the embedded engine's; vLLM sends none)."""
    policy_version_spans: Optional[VersionSpans] = None
    """Sent only when an update came mid-answer (two spans or more)."""
    image_grids: Optional[list[list[int]]] = None
    """Each prompt image's patch grid (temporal, height, width), in the order of its placeholder runs (the embedded
    engine's, beside `prompt_token_ids`; a prompt without images has none)."""

    @property
    def first(self) -> AnswerChoice:
        """Choice 0 (an empty one when the engine sent none)."""
        return self.choices[0] if self.choices else AnswerChoice()

    @property
    def prompt_ids(self) -> Optional[list[int]]:
        """The prompt's ids, from the top level or else from choice 0."""
        return self.prompt_token_ids if self.prompt_token_ids is not None else self.first.prompt_token_ids

    @property
    def completion_ids(self) -> Optional[list[int]]:
        """Choice 0's token ids (None when the engine sent none)."""
        return self.first.token_ids

    @property
    def logprobs(self) -> Optional[list[float]]:
        """Choice 0's per-token log-probabilities (None when none were sent)."""
        return self.first.logprobs.values() if self.first.logprobs is not None else None

    @property
    def content(self) -> str:
        """Choice 0's text ('' when it is only tool calls)."""
        return self.first.message.content or ""

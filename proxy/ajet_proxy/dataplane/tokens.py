"""Reading an engine's answer, plain and streamed, into an `EngineAnswer` (`ajet_core.engine_answer`).

A plain answer is parsed whole (`parse_answer`). A stream's events are read as they pass through, without a model
per event (one event per token: the hot path), and assembled into one `EngineAnswer` at its end
(`StreamAccumulator`): its first chunk carries `prompt_token_ids`, each chunk its `token_ids` and `logprobs`, the
chunk that ends it `finish_reason`, `stop_reason` and (after an update mid-answer) `policy_version_spans`. Nothing
here re-tokenises text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional, Union, cast

import orjson
from pydantic import ValidationError
from pydantic.main import IncEx

from ajet_core.chat_request import invalid_request
from ajet_core.engine_answer import EngineAnswer, TokenLogprob
from ajet_proxy.dataplane import types as wire
from ajet_proxy.dataplane.sse import DONE, SSESplitter

_KEPT_IN_COLUMNS: IncEx = {"logprobs", "token_ids"}
_CHOICES: Mapping[str, Union[IncEx, bool]] = {"__all__": _KEPT_IN_COLUMNS}
STREAM_LOGGED: Mapping[str, Union[IncEx, bool]] = {"choices": _CHOICES, "prompt_token_ids": True}
"""What the call log's `response` of a stream leaves out: the ids and logprobs it keeps in columns of their own."""


def malformed(exc: ValidationError, what: str) -> str:
    """Why an engine's `what` (its answer, its stream) is not an `EngineAnswer`: its first wrong field, named as a
    client's wrong field is (`ajet_core.chat_request.invalid_request`)."""
    return f"the engine's {what} is malformed: {invalid_request(exc).detail}"


def answer_json(data: bytes) -> Optional[wire.AnswerJson]:
    """An engine's answer (or one stream event) as the JSON object it is, read through and passed on (its fields are
    checked by `parse_answer` or `StreamAccumulator.result`); None when it is not one (an error page, `[DONE]`)."""
    try:
        parsed: wire.AnswerJson = orjson.loads(data)  # no `cast` call: this runs once per stream event
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def parse_answer(data: wire.AnswerJson) -> tuple[Optional[EngineAnswer], Optional[str]]:
    """A plain answer's `EngineAnswer`; else None and what is wrong with it, naming the field (`malformed`)."""
    try:
        return EngineAnswer.model_validate(data), None
    except ValidationError as exc:
        return None, malformed(exc, "answer")


class StreamAccumulator:
    """Feeds on a chat stream's events as they pass through; assembles choice 0 of the stream."""

    def __init__(self) -> None:
        self._sse = SSESplitter()
        self.prompt_ids: Optional[list[int]] = None
        """The prompt's ids, once a chunk carried them (the first, from vLLM and the embedded engine)."""
        self._ids: list[int] = []
        self._lps: list[TokenLogprob] = []
        self._saw_ids = False
        self._saw_lps = False
        self._parts: list[str] = []
        self._tools: dict[int, wire.ChatToolCall] = {}
        self._end = wire.ChoiceJson()
        """What the stream's end said: its `finish_reason` and `stop_reason`."""
        self._usage: Optional[wire.UsageCounts] = None
        self._spans: Optional[list[list[int]]] = None
        self._grids: Optional[list[list[int]]] = None
        self.meta = wire.AnswerJson()
        """The answer's `id`, `created` and `model`, from its first event."""
        self.done = False
        self.errors: list[Union[wire.EngineError, str]] = []

    def feed(self, chunk: bytes) -> None:
        """Consume raw bytes (complete events are parsed, a partial one is kept for later)."""
        for payload in self._sse.feed(chunk):
            self.add(payload)

    def add(self, payload: bytes) -> Optional[wire.AnswerJson]:
        """Consume one event's payload; returns it parsed (None for [DONE] or what is not a JSON object)."""
        if payload == DONE:
            self.done = True
            return None
        data = answer_json(payload)
        if data is None:
            return None
        if "error" in data:
            self.errors.append(data["error"])
            return data
        if not self.meta:
            self.meta = _meta(data)
        if data.get("prompt_token_ids") is not None:
            self.prompt_ids = data["prompt_token_ids"]
        if data.get("image_grids") is not None:
            self._grids = data["image_grids"]
        if data.get("usage"):
            self._usage = data["usage"]
        if data.get("policy_version_spans") is not None:  # the last chunk of an answer an update straddled
            self._spans = data["policy_version_spans"]
        for ch in data.get("choices") or []:
            if ch.get("index", 0) == 0:
                self._choice(ch)
        return data

    def _choice(self, ch: wire.ChoiceJson) -> None:
        if ch.get("prompt_token_ids") is not None and self.prompt_ids is None:
            self.prompt_ids = ch["prompt_token_ids"]
        ids = ch.get("token_ids")
        if ids is not None:
            self._saw_ids = True
            self._ids.extend(ids)
        logprobs = ch.get("logprobs")
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        if isinstance(content, list):
            self._saw_lps = True
            self._lps.extend(content)
        if ch.get("finish_reason"):
            self._end["finish_reason"] = ch["finish_reason"]
            self._end["stop_reason"] = ch.get("stop_reason")
        delta = ch.get("delta") or {}
        text = delta.get("content")
        if text:
            self._parts.append(text)
        for tc in delta.get("tool_calls") or []:
            slot = self._tools.setdefault(tc.get("index", 0), {"id": None, "type": "function"})
            slot["id"] = tc.get("id") or slot.get("id")
            fn, into = tc.get("function") or {}, slot.setdefault("function", {"name": "", "arguments": ""})
            into["name"] = into.get("name", "") + (fn.get("name") or "")
            into["arguments"] = into.get("arguments", "") + (fn.get("arguments") or "")

    @property
    def completion_tokens(self) -> int:
        """Completion token ids seen so far."""
        return len(self._ids)

    def result(self) -> EngineAnswer:
        """The stream assembled into one answer (what it carried so far, when it ended early). Raises
        `pydantic.ValidationError` naming the field when a chunk carried a malformed one."""
        tools = [self._tools[i] for i in sorted(self._tools)]
        choice: wire.ChoiceJson = {
            "message": {"content": "".join(self._parts), **({"tool_calls": tools} if tools else {})},
            "finish_reason": self._end.get("finish_reason"),
            "stop_reason": self._end.get("stop_reason"),
            "logprobs": {"content": self._lps} if self._saw_lps else None,
            "token_ids": self._ids if self._saw_ids else None,
        }
        usage = self._usage
        if usage is None and self.prompt_ids is not None and self._saw_ids:  # counted from the ids
            usage = {"prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self._ids),
                     "total_tokens": len(self.prompt_ids) + len(self._ids)}  # fmt: skip
        # one validation of the whole answer (in pydantic's core), not a model built per part in Python
        return EngineAnswer.model_validate(
            {**self.meta, "choices": [choice], "usage": usage, "prompt_token_ids": self.prompt_ids,
             "policy_version_spans": self._spans, "image_grids": self._grids}
        )  # fmt: skip

    def assembled_response(self, answer: EngineAnswer) -> wire.AnswerJson:
        """`answer` (this stream's `result()`) as a non-streamed answer for the call log and the shape's last event:
        its ids and logprobs left out (the log keeps them in columns of their own)."""
        return cast(wire.AnswerJson, answer.model_dump(exclude=STREAM_LOGGED, exclude_none=True))  # its dump's shape


def _meta(data: wire.AnswerJson) -> wire.AnswerJson:
    """The `id`, `created` and `model` of a stream's first event, those it has."""
    meta = wire.AnswerJson()
    if data.get("id") is not None:
        meta["id"] = data["id"]
    if data.get("created") is not None:
        meta["created"] = data["created"]
    if data.get("model") is not None:
        meta["model"] = data["model"]
    return meta

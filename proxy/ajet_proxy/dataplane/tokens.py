"""Pure extraction of token ids and logprobs from vLLM-format answers, plain and streamed.

vLLM with `return_token_ids: true` answers with `prompt_token_ids` (top level; in a stream, in the
first chunk) and `token_ids` per choice (in a stream, per chunk); `logprobs: true` adds
`choices[i].logprobs.content[j].logprob`. Nothing here re-tokenises text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import orjson

from ajet_proxy.dataplane.sse import DONE, SSESplitter


@dataclass
class Extracted:
    """What the call log keeps from one answer (choice 0)."""

    prompt_ids: Optional[list[int]] = None
    completion_ids: Optional[list[int]] = None
    logprobs: Optional[list[float]] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[str | int] = None
    """vLLM's `stop_reason`: the stop string (or token id) that ended the answer; None for EOS or length."""
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Optional[dict[str, Any]] = None
    version_spans: Optional[list[tuple[int, int]]] = None
    """The engine's `policy_version_spans`: which policy version sampled which tokens (an update mid-answer)."""


def _logprob_values(logprobs: Any) -> Optional[list[float]]:
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
        return None
    return [float(item["logprob"]) for item in logprobs["content"]]


def version_spans(raw: Any) -> Optional[list[tuple[int, int]]]:
    """An engine's `policy_version_spans` (`[[offset, version], ...]`), or None when absent or malformed."""
    if not isinstance(raw, list) or not raw:
        return None
    try:
        return [(int(offset), int(version)) for offset, version in raw]
    except (TypeError, ValueError):
        return None


def extract_response(data: dict[str, Any]) -> Extracted:
    """Token ids, logprobs and finish reason of a non-streamed chat completion."""
    out = Extracted(prompt_ids=data.get("prompt_token_ids"), usage=data.get("usage"))
    out.version_spans = version_spans(data.get("policy_version_spans"))
    choices = data.get("choices") or []
    if choices:
        ch = choices[0]
        out.prompt_ids = out.prompt_ids if out.prompt_ids is not None else ch.get("prompt_token_ids")
        out.completion_ids = ch.get("token_ids")
        out.logprobs = _logprob_values(ch.get("logprobs"))
        out.finish_reason = ch.get("finish_reason")
        out.stop_reason = ch.get("stop_reason")
        msg = ch.get("message") or {}
        out.content = msg.get("content") or ""
        out.tool_calls = msg.get("tool_calls") or []
    return out


class StreamAccumulator:
    """Feeds on a chat stream's events as they pass through; assembles choice 0 of the stream."""

    def __init__(self) -> None:
        self._sse = SSESplitter()
        self.out = Extracted()
        self._ids: list[int] = []
        self._lps: list[float] = []
        self._saw_ids = False
        self._saw_lps = False
        self._parts: list[str] = []
        self._tools: dict[int, dict[str, Any]] = {}
        self.meta: dict[str, Any] = {}
        self.done = False
        self.errors: list[Any] = []

    def feed(self, chunk: bytes) -> None:
        """Consume raw bytes (complete events are parsed, a partial one is kept for later)."""
        for payload in self._sse.feed(chunk):
            self.add(payload)

    def add(self, payload: bytes) -> Optional[dict[str, Any]]:
        """Consume one event's payload; returns it parsed (None for [DONE] or what is not JSON)."""
        if payload == DONE:
            self.done = True
            return None
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        if "error" in data:
            self.errors.append(data["error"])
            return data
        if not self.meta:
            self.meta = {k: data.get(k) for k in ("id", "created", "model")}
        if data.get("prompt_token_ids") is not None:
            self.out.prompt_ids = data["prompt_token_ids"]
        if data.get("usage"):
            self.out.usage = data["usage"]
        if data.get("policy_version_spans") is not None:  # the last chunk of an answer an update straddled
            self.out.version_spans = version_spans(data["policy_version_spans"])
        for ch in data.get("choices") or []:
            if ch.get("index", 0) == 0:
                self._choice(ch)
        return data

    def _choice(self, ch: dict[str, Any]) -> None:
        if ch.get("prompt_token_ids") is not None and self.out.prompt_ids is None:
            self.out.prompt_ids = ch["prompt_token_ids"]
        if ch.get("token_ids") is not None:
            self._saw_ids = True
            self._ids.extend(ch["token_ids"])
        lps = _logprob_values(ch.get("logprobs"))
        if lps is not None:
            self._saw_lps = True
            self._lps.extend(lps)
        if ch.get("finish_reason"):
            self.out.finish_reason = ch["finish_reason"]
            self.out.stop_reason = ch.get("stop_reason")
        delta = ch.get("delta") or {}
        if delta.get("content"):
            self._parts.append(delta["content"])
        for tc in delta.get("tool_calls") or []:
            slot = self._tools.setdefault(
                tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            slot["id"] = tc.get("id") or slot["id"]
            fn = tc.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""

    @property
    def completion_tokens(self) -> int:
        """Completion token ids seen so far."""
        return len(self._ids)

    def result(self) -> Extracted:
        """The assembled choice 0."""
        self.out.completion_ids = self._ids if self._saw_ids else None
        self.out.logprobs = self._lps if self._saw_lps else None
        self.out.content = "".join(self._parts)
        self.out.tool_calls = [self._tools[i] for i in sorted(self._tools)]
        return self.out

    def assembled_response(self) -> dict[str, Any]:
        """A non-streamed-style answer built from the stream, for the call log."""
        ex = self.result()
        message: dict[str, Any] = {"role": "assistant", "content": ex.content}
        if ex.tool_calls:
            message["tool_calls"] = ex.tool_calls
        usage = ex.usage
        if usage is None and ex.prompt_ids is not None and ex.completion_ids is not None:  # counted from the ids
            usage = {
                "prompt_tokens": len(ex.prompt_ids),
                "completion_tokens": len(ex.completion_ids),
                "total_tokens": len(ex.prompt_ids) + len(ex.completion_ids),
            }
        return {
            **self.meta,
            "object": "chat.completion",
            "usage": usage,
            "choices": [
                {"index": 0, "message": message, "finish_reason": ex.finish_reason, "stop_reason": ex.stop_reason}
            ],
        }

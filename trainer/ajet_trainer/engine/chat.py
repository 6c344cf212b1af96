"""Chat requests in, OpenAI/vLLM-format answers out (pure functions, no model).

- `prompt_ids`: messages (+ tools) through the tokenizer's chat template.
- `parse_tool_calls`: Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
- `completion_body` / `chunk_body`: answers with `prompt_token_ids`, per-choice `token_ids` and
  `logprobs.content[j].logprob`, exactly where vLLM puts them.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Optional

from ajet_trainer.engine.generation import GenRequest, GenResult
from ajet_trainer.errors import EngineRequestError
from ajet_trainer.types import Tokenizer

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _normalise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            m["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        elif content is None:
            m["content"] = ""
        out.append(m)
    return out


def prompt_ids(tokenizer: Any, body: dict[str, Any]) -> list[int]:
    """Token ids of the rendered chat prompt (generation prompt added)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise EngineRequestError("messages: a non-empty list is required")
    kwargs = {"tools": body["tools"]} if body.get("tools") else {}
    text = tokenizer.apply_chat_template(_normalise(messages), tokenize=False, add_generation_prompt=True, **kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


def gen_request(body: dict[str, Any], prompt: list[int], default_temperature: float, max_tokens_cap: int
                ) -> GenRequest:
    """Sampling settings of a chat request, validated."""
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or max_tokens_cap
    try:
        req = GenRequest(prompt_ids=prompt, max_tokens=max(1, min(int(max_tokens), max_tokens_cap)),
                         temperature=float(body.get("temperature", default_temperature)),
                         top_p=float(body.get("top_p", 1.0)), seed=body.get("seed"), stop=list(stop))
    except (TypeError, ValueError) as exc:
        raise EngineRequestError(f"bad sampling parameter: {exc}") from exc
    if req.temperature < 0 or not 0 < req.top_p <= 1:
        raise EngineRequestError("temperature must be >= 0 and 0 < top_p <= 1")
    return req


def parse_tool_calls(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Split completion text into (content, tool_calls); malformed blocks stay in the content."""
    calls, kept = [], text
    for match in TOOL_CALL_RE.finditer(text):
        try:
            obj = json.loads(match.group(1))
            name, args = obj["name"], obj.get("arguments", {})
        except (ValueError, KeyError, TypeError):
            continue
        arguments = args if isinstance(args, str) else json.dumps(args)
        calls.append({"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                      "function": {"name": str(name), "arguments": arguments}})
        kept = kept.replace(match.group(0), "", 1)
    return (kept.strip() if calls else text), calls


def _logprobs(tokenizer: Any, ids: list[int], lps: list[float]) -> dict[str, Any]:
    return {"content": [{"token": tokenizer.decode([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(ids, lps)]}


def completion_body(tokenizer: Tokenizer, model: str, prompt: list[int], res: GenResult, tools: bool,
                    want_ids: bool, want_logprobs: bool) -> dict[str, Any]:
    """A non-streamed chat completion in vLLM's format."""
    content, calls = parse_tool_calls(res.text) if tools else (res.text, [])
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    choice: dict[str, Any] = {"index": 0, "message": message,
                              "finish_reason": "tool_calls" if calls else res.finish_reason}
    if want_logprobs:
        choice["logprobs"] = _logprobs(tokenizer, res.token_ids, res.logprobs)
    if want_ids:
        choice["token_ids"] = res.token_ids
    body: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                            "created": int(time.time()), "model": model, "choices": [choice],
                            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(res.token_ids),
                                      "total_tokens": len(prompt) + len(res.token_ids)},
                            "policy_version": res.policy_version}
    if want_ids:
        body["prompt_token_ids"] = prompt
    return body


def chunk_body(cid: str, model: str, delta: dict[str, Any], token: Optional[tuple[int, float, str]] = None,
               finish: Optional[str] = None, prompt: Optional[list[int]] = None, want_ids: bool = False,
               want_logprobs: bool = False) -> dict[str, Any]:
    """One streamed chunk; the first carries `prompt_token_ids`, each token chunk its `token_ids`."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if token is not None:
        tok, lp, piece = token
        if want_ids:
            choice["token_ids"] = [tok]
        if want_logprobs:
            choice["logprobs"] = {"content": [{"token": piece, "logprob": lp, "bytes": None, "top_logprobs": []}]}
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                            "model": model, "choices": [choice]}
    if prompt is not None and want_ids:
        body["prompt_token_ids"] = prompt
    return body

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


def prompt_ids(tokenizer: Any, body: dict[str, Any], max_context: Optional[int] = None) -> list[int]:
    """Token ids of the rendered chat prompt (generation prompt added) of a body that passed
    `ajet.chat_fields.check_chat_fields`; `EngineRequestError` when the chat template refuses the messages
    or the prompt leaves no room in the model's context."""
    messages = body["messages"]
    kwargs = {"tools": body["tools"]} if body.get("tools") else {}
    try:
        text = tokenizer.apply_chat_template(_normalise(messages), tokenize=False, add_generation_prompt=True,
                                             **kwargs)
    except Exception as exc:  # noqa: BLE001 - a template error is the request's fault (e.g. roles out of order)
        raise EngineRequestError(f"messages: the chat template refused them ({type(exc).__name__}: {exc})") from exc
    ids = tokenizer.encode(text, add_special_tokens=False)
    if max_context is not None and len(ids) >= max_context:
        raise EngineRequestError(f"messages: the prompt is {len(ids)} tokens; this model's context is "
                                 f"{max_context} tokens")
    return ids


GREEDY_BELOW = 1e-5
"""A temperature below this samples greedily (as vLLM does): dividing logits by 1e-45 overflows."""


def gen_request(body: dict[str, Any], prompt: list[int], default_temperature: float, max_tokens_cap: int,
                max_context: Optional[int] = None) -> GenRequest:
    """Sampling settings of a chat request whose fields passed `ajet.chat_fields.check_chat_fields`."""
    stop = body.get("stop") or []
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or max_tokens_cap
    temperature = body.get("temperature")
    temperature = default_temperature if temperature is None else float(temperature)
    top_p = body.get("top_p")
    if max_context is not None:
        max_tokens_cap = min(max_tokens_cap, max_context - len(prompt))
    return GenRequest(prompt_ids=prompt, max_tokens=min(max_tokens, max_tokens_cap),
                      temperature=0.0 if temperature < GREEDY_BELOW else temperature,
                      top_p=1.0 if top_p is None else float(top_p), seed=body.get("seed"),
                      stop=[stop] if isinstance(stop, str) else list(stop))


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

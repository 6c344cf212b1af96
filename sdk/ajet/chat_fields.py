"""The chat-completion fields the swarm reads or forwards, checked strictly and once.

Both the proxy (before a call gets a sequence number) and the embedded engine (before a request joins
a batch) run `check_chat_fields`; a bad value is `ChatFieldError` naming the field, answered 400. A
request that passes cannot fail another agent's request in the engine's batch: every sampling value
is of its type, finite and in range. Fields not listed here pass unchecked.
`None` is the same as absent, as in OpenAI's API.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

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
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
"""Message roles OpenAI's API knows."""
CONTENT_TYPES = (str, list)
"""A message's content: text, or a list of content parts (None for an assistant turn with tool calls)."""


class ChatFieldError(ValueError):
    """A chat request field with a wrong type or value; `param` is its dotted path."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _number_in(lo: float, hi: float, lo_open: bool = False) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        if not _is_number(v):
            return "must be a finite number"
        if v < lo or v > hi or (lo_open and v == lo):
            return f"must be in {'(' if lo_open else '['}{lo}, {hi}]"
        return None

    return check


def _int_in(lo: int, hi: int) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        if not _is_int(v):
            return "must be an integer"
        return None if lo <= v <= hi else f"must be in [{lo}, {hi}]"

    return check


def _of_type(kind: type, name: str) -> Callable[[Any], Optional[str]]:
    def check(v: Any) -> Optional[str]:
        ok = isinstance(v, bool) if kind is bool else isinstance(v, kind) and not isinstance(v, bool)
        return None if ok else f"must be {name}"

    return check


def _stop(v: Any) -> Optional[str]:
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        return "must be a string or a list of strings"
    if len(items) > MAX_STOP_STRINGS:
        return f"at most {MAX_STOP_STRINGS} stop strings are accepted"
    if any(not s or len(s) > MAX_STOP_CHARS for s in items):
        return f"each stop string must have 1 to {MAX_STOP_CHARS} characters"
    return None


def _n(v: Any) -> Optional[str]:
    return None if _is_int(v) and v == 1 else "only n=1 is supported in training episodes (run n episodes instead)"


def _tool_choice(v: Any) -> Optional[str]:
    if isinstance(v, str):
        return None if v in ("none", "auto", "required") else "must be 'none', 'auto', 'required' or an object"
    return None if isinstance(v, dict) else "must be a string or an object"


FIELD_CHECKS: dict[str, Callable[[Any], Optional[str]]] = {
    "model": _of_type(str, "a string"),
    "stream": _of_type(bool, "a boolean"),
    "stream_options": _of_type(dict, "an object"),
    "n": _n,
    "max_tokens": _int_in(*MAX_TOKENS_RANGE),
    "max_completion_tokens": _int_in(*MAX_TOKENS_RANGE),
    "temperature": _number_in(*TEMPERATURE_RANGE),
    "top_p": _number_in(*TOP_P_RANGE, lo_open=True),
    "presence_penalty": _number_in(*PENALTY_RANGE),
    "frequency_penalty": _number_in(*PENALTY_RANGE),
    "seed": _int_in(*SEED_RANGE),
    "stop": _stop,
    "logprobs": _of_type(bool, "a boolean"),
    "top_logprobs": _int_in(0, MAX_TOP_LOGPROBS),
    "tools": _of_type(list, "a list of tools"),
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _of_type(bool, "a boolean"),
    "response_format": _of_type(dict, "an object"),
    "user": _of_type(str, "a string"),
    "return_token_ids": _of_type(bool, "a boolean"),
}
"""Field name -> its check (None when the value is fine, else the reason)."""


def check_messages(messages: Any) -> None:
    """`ChatFieldError` unless `messages` is a non-empty list of messages with a string role and valid content."""
    if not isinstance(messages, list) or not messages:
        raise ChatFieldError("messages", "a non-empty list of messages is required")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ChatFieldError(f"messages.{i}", "each message must be an object")
        if m.get("role") not in ROLES:
            raise ChatFieldError(f"messages.{i}.role", f"each message needs a role, one of {', '.join(ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, CONTENT_TYPES):
            raise ChatFieldError(f"messages.{i}.content", "must be a string or a list of content parts")
        if isinstance(content, list):
            _check_parts(content, f"messages.{i}.content")
        if m.get("tool_calls") is not None:
            _check_tool_calls(m["tool_calls"], f"messages.{i}.tool_calls")
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None and not isinstance(m[key], str):
                raise ChatFieldError(f"messages.{i}.{key}", "must be a string")


TEXT_PARTS = ("text",)
"""Content part types the engines read: they serve text, so an image, audio or file part is refused, never dropped."""


def _check_parts(parts: list[Any], where: str) -> None:
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise ChatFieldError(where, "each content part must be an object")
        if part.get("type") not in TEXT_PARTS:
            raise ChatFieldError(
                f"{where}.{j}.type",
                f"{part.get('type')!r} parts are not supported: the policy takes text only (no image, audio or file)",
            )
        if not isinstance(part.get("text"), str):
            raise ChatFieldError(f"{where}.{j}.text", "required, a string")


def _check_tool_calls(calls: Any, where: str) -> None:
    """An assistant turn's tool calls: `{"id", "type": "function", "function": {"name", "arguments"}}` each."""
    if not isinstance(calls, list):
        raise ChatFieldError(where, "must be a list")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise ChatFieldError(
                f"{where}.{j}.function", "each tool call needs a function with a string name and string arguments"
            )
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise ChatFieldError(f"{where}.{j}.id", "must be a string")
        if call.get("type") not in (None, "function"):
            raise ChatFieldError(f"{where}.{j}.type", "must be 'function'")


def check_chat_fields(body: dict[str, Any]) -> None:
    """`ChatFieldError` for the first field of a chat-completions body with a wrong type or value."""
    check_messages(body.get("messages"))
    for name, check in FIELD_CHECKS.items():
        value = body.get(name)
        if value is not None:
            reason = check(value)
            if reason is not None:
                raise ChatFieldError(name, reason)
    if body.get("tools") is not None and not all(isinstance(t, dict) for t in body["tools"]):
        raise ChatFieldError("tools", "each tool must be an object")
    if body.get("tool_choice") is not None and not body.get("tools"):
        raise ChatFieldError("tool_choice", "is only allowed when tools are specified")


def content_text(content: Any) -> str:
    """A message's text as a chat template reads it: a string as it is, text parts joined, nothing else ("")."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def template_tools(body: dict[str, Any]) -> Optional[list[Any]]:
    """The tools a chat request's template sees, and its answer is parsed for calls with (None when it has none,
    or `tool_choice` is "none"). The proxy's token history renders new messages by this same rule as the engine
    renders whole prompts, or their tokens would not line up."""
    tools = body.get("tools")
    return tools if tools and body.get("tool_choice") != "none" else None


def max_tokens_asked(body: dict[str, Any]) -> Optional[int]:
    """The answer length a chat request's client asked for (`max_completion_tokens`, else `max_tokens`; None when it
    set neither). The server's own limits may cut an answer shorter; see `cut_by_server`."""
    asked = body.get("max_completion_tokens")
    return body.get("max_tokens") if asked is None else asked


def cut_by_server(body: dict[str, Any], finish_reason: Optional[str], completion_tokens: int) -> bool:
    """Whether an answer ended by length was cut by the server's limit (the job's per-turn cap, the model's
    context), not by one the client set: it asked for none, or for more than it got."""
    asked = max_tokens_asked(body)
    return finish_reason == "length" and (asked is None or completion_tokens < asked)


def prompt_over_job(tokens: int, max_prompt: int) -> str:
    """Why a prompt over the job's `max_prompt_length` is refused (the engine's and the proxy's one message)."""
    return (
        f"messages: the prompt is {tokens} tokens; this job trains prompts of at most {max_prompt} tokens "
        "(AgentJetJob.max_prompt_length): end the episode, compact the history, or raise the limit"
    )

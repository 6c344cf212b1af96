"""How a chat template turns messages into ids, and the model's text into tool calls: the rules the embedded
engine serves by and the template check runs (any tokenizer with a chat template, no model).

- `render_ids`: messages (+ tools) through the tokenizer's chat template, as vLLM renders them: content parts
  joined to text, tool-call arguments parsed from their JSON string first (a template re-renders them).
- `parse_tool_calls`: Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Optional

from ajet.chat_request import content_text
from ajet.errors import InvalidRequest

TOOL_CALL_OPEN = "<tool_call>"
"""Where a Hermes-style tool call begins in the completion text (a stream holds back from here)."""
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _normalise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a chat template takes them: content parts joined to text, and tool-call arguments parsed
    from their JSON string to an object (as vLLM does; a template then re-renders them, e.g. with `tojson`).
    Arguments that are not a JSON object become `{}`, as in vLLM, so one bad turn cannot break the rest."""
    out = []
    for m in messages:
        m = dict(m)
        if not isinstance(m.get("content"), str):
            m["content"] = content_text(m.get("content"))
        if m.get("tool_calls"):
            m["tool_calls"] = [_parsed_arguments(tc) for tc in m["tool_calls"]]
        out.append(m)
    return out


def _parsed_arguments(tc: dict[str, Any]) -> dict[str, Any]:
    fn = dict(tc.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    fn["arguments"] = args if isinstance(args, dict) else {}
    return {**tc, "function": fn}


RESERVED_TEMPLATE_KWARGS = frozenset(
    {"conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt", "tokenize"}
)
"""`chat_template_kwargs` keys a request may not set: `apply_chat_template`'s own parameters."""


def template_options(body: dict[str, Any]) -> dict[str, Any]:
    """The request's own chat template (`chat_template`) and template variables (`chat_template_kwargs`, e.g.
    `enable_thinking`), as `apply_chat_template` keywords (vLLM's request fields of the same names);
    `InvalidRequest` naming the field when one is malformed."""
    out: dict[str, Any] = {}
    template = body.get("chat_template")
    if template is not None:
        if not isinstance(template, str):
            raise InvalidRequest.for_field("chat_template", "must be a string (a Jinja chat template)")
        out["chat_template"] = template
    extra = body.get("chat_template_kwargs")
    if extra is not None:
        if not isinstance(extra, dict) or not all(isinstance(k, str) for k in extra):
            raise InvalidRequest.for_field("chat_template_kwargs", "must be an object of template variables")
        clash = sorted(RESERVED_TEMPLATE_KWARGS & extra.keys())
        if clash:
            raise InvalidRequest.for_field("chat_template_kwargs", f"may not set {', '.join(clash)}")
        out.update(extra)
    return out


def render_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Optional[list[dict[str, Any]]] = None,
    add_generation_prompt: bool = True,
    options: Optional[dict[str, Any]] = None,
) -> list[int]:
    """Token ids of `messages` (+ `tools`) through the tokenizer's chat template (or `options`' own, with its
    variables: `template_options`); `InvalidRequest` naming `messages` when the template refuses them."""
    kwargs = {"tools": tools} if tools else {}
    kwargs.update(options or {})
    try:
        text = tokenizer.apply_chat_template(
            _normalise(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
    except Exception as exc:  # noqa: BLE001 - a template error is the request's fault (e.g. roles out of order)
        why = f"the chat template refused them ({type(exc).__name__}: {exc})"
        raise InvalidRequest.for_field("messages", why) from exc
    return tokenizer.encode(text, add_special_tokens=False)


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
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": str(name), "arguments": arguments},
            }
        )
        kept = kept.replace(match.group(0), "", 1)
    return (kept.strip() if calls else text), calls

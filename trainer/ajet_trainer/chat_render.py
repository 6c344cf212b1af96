"""How a chat template turns messages into ids, and the model's text into tool calls: the rules the embedded
engine serves by and the template check runs (any tokenizer with a chat template, no model).

- `render_ids`: messages (+ tools) through the tokenizer's chat template, as vLLM renders them: content parts
  joined to text, tool-call arguments parsed from their JSON string first (a template re-renders them), each tool
  in the form vLLM's request model gives it (`template_tool`).
- `parse_tool_calls`: Hermes-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Optional

from ajet.errors import InvalidRequest
from ajet_core.chat_request import content_text
from ajet_core.images import IMAGE_PARTS

TOOL_CALL_OPEN = "<tool_call>"
"""Where a Hermes-style tool call begins in the completion text (a stream holds back from here)."""
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


def _normalise(messages: list[dict[str, Any]], image_text: str = "") -> list[dict[str, Any]]:
    """Messages as a chat template takes them: content parts joined to text (an image part as `image_text`, the
    model's placeholder), and tool-call arguments parsed from their JSON string to an object (as vLLM does; a template
    then re-renders them, e.g. with `tojson`). Arguments that are not a JSON object become `{}`, as in vLLM, so one
    bad turn cannot break the rest."""
    out = []
    for m in messages:
        m = dict(m)
        if not isinstance(m.get("content"), str):
            m["content"] = _joined(m.get("content"), image_text)
        if m.get("tool_calls"):
            m["tool_calls"] = [_parsed_arguments(tc) for tc in m["tool_calls"]]
        out.append(m)
    return out


def _joined(content: Any, image_text: str) -> str:
    """Content parts as one text: text parts as they are, image parts as `image_text` (in their place)."""
    if not image_text or not isinstance(content, list):
        return content_text(content)
    return "".join(image_text if p.get("type") in IMAGE_PARTS else content_text([p]) for p in content)


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


def template_tool(tool: Any) -> Any:
    """A tool as vLLM hands it to the chat template (`ChatCompletionToolsParam.model_dump()`), so both engines render
    it to the same tokens: `type` and `function` only; the function's `name`, `description` and `parameters` (None
    where missing), then `strict` and `defer_loading` where set (the tool's `defer_loading` carried into a function
    without one); other keys dropped. A tool that is not a mapping is left as it is (validation names it)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
        return tool
    fn, deferred = tool["function"], tool.get("defer_loading")
    out_fn = {"name": fn.get("name"), "description": fn.get("description"), "parameters": fn.get("parameters")}
    if fn.get("strict") is not None:
        out_fn["strict"] = fn["strict"]
    fn_deferred = fn.get("defer_loading") if fn.get("defer_loading") is not None else deferred
    if fn_deferred is not None:
        out_fn["defer_loading"] = fn_deferred
    out = {"type": tool.get("type", "function"), "function": out_fn}
    return {**out, "defer_loading": deferred} if deferred is not None else out


def render_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Optional[list[dict[str, Any]]] = None,
    add_generation_prompt: bool = True,
    options: Optional[dict[str, Any]] = None,
    image_text: str = "",
) -> list[int]:
    """Token ids of `messages` (+ `tools`) through the tokenizer's chat template (or `options`' own, with its
    variables: `template_options`), each image part rendered as `image_text` (a VL model's placeholder, expanded
    after: `ajet_trainer.vision`); `InvalidRequest` naming `messages` when the template refuses them."""
    kwargs = {"tools": [template_tool(t) for t in tools]} if tools else {}
    kwargs.update(options or {})
    try:
        text = tokenizer.apply_chat_template(
            _normalise(messages, image_text), tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
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

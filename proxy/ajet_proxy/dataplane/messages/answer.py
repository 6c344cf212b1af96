"""A chat answer as Anthropic's Messages API writes it: the message, its tool_use blocks, its stop reason. The stream's
events are `shape.py`'s."""

from __future__ import annotations

import json
import uuid
from typing import Optional, Union

from ajet_proxy.dataplane.messages.types import ContentBlock, MessageJson, ToolUseBlock
from ajet_proxy.dataplane.types import ChatToolCall, UsageCounts


def new_message_id() -> str:
    """A fresh message id."""
    return f"msg_{uuid.uuid4().hex}"


def stop_reason(finish_reason: Optional[str], matched: Union[int, str, None]) -> str:
    """Chat's finish reason (and vLLM's `stop_reason`, the stop string matched) in Anthropic's terms."""
    if finish_reason == "tool_calls":
        return "tool_use"
    if finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if isinstance(matched, str) else "end_turn"


def tool_use_block(call: ChatToolCall) -> ToolUseBlock:
    """A chat tool call as a tool_use block (arguments that are not a JSON object are kept as `{"raw": ...}`)."""
    fn = call.get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = None
    return {
        "type": "tool_use",
        "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
        "name": fn.get("name", ""),
        "input": args if isinstance(args, dict) else {"raw": fn.get("arguments")},
    }


def message_object(
    mid: str,
    model: str,
    content: list[ContentBlock],
    finish_reason: Optional[str],
    matched: Union[int, str, None],
    usage: Optional[UsageCounts],
) -> MessageJson:
    """An Anthropic message."""
    usage = usage or {}
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(finish_reason, matched),
        "stop_sequence": matched if isinstance(matched, str) else None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }

"""Chat completions' request checks, and the model objects of `/v1/models`."""

from __future__ import annotations

from typing import Any

import orjson

from ajet.chat_request import validate_chat
from ajet.errors import InvalidRequest
from ajet_proxy.dataplane.mapping import parse_json_object
from ajet_proxy.limits import DEFAULT_LIMITS, InputLimits, check_chat_shape


def parse_chat_body(raw: bytes, limits: InputLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The request body as a dict; `InvalidRequest` naming the field when malformed or over a limit."""
    body = parse_json_object(raw)
    if "kv_transfer_params" in body:  # the engine would run its ids instead of the messages: the proxy's alone
        raise InvalidRequest(
            "kv_transfer_params: set by the proxy only (it sends the episode's token history this way)",
            fields=["kv_transfer_params"],
        )
    check_chat_shape(body, limits)
    try:
        orjson.dumps(body)  # a lone surrogate (e.g. "\\udaa4") parses but cannot be sent on: refuse it here
    except orjson.JSONEncodeError as exc:
        raise InvalidRequest(f"body: a string cannot be encoded as UTF-8 ({exc})", fields=["body"]) from exc
    validate_chat(body)
    return body


def model_object(name: str) -> dict[str, Any]:
    """One entry of `/v1/models`."""
    return {"id": name, "object": "model", "created": 0, "owned_by": "ajet"}

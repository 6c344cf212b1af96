"""What the API description says, so that it matches the answers (checked by schemathesis in CI).

- Every control route documents its error answers as `ErrorBody` (the 422 included: FastAPI's own
  `HTTPValidationError` shape is never sent).
- The data plane documents OpenAI's error object, its request body (the chat fields the proxy checks,
  `ajet.chat_request`) and its two success shapes (JSON, or an SSE stream).
"""

from __future__ import annotations

from typing import Any

from ajet.chat_request import (
    MAX_STOP_STRINGS,
    MAX_TOKENS_RANGE,
    MAX_TOP_LOGPROBS,
    ROLES,
    SEED_RANGE,
    TEMPERATURE_RANGE,
    TOP_P_RANGE,
)
from ajet.protocol import AnthropicErrorBody, ErrorBody, OpenAIErrorBody

CONTROL_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Wrong or missing swarm token (`Unauthorized`)"},
    404: {"model": ErrorBody, "description": "Unknown episode (`EpisodeNotFound`)"},
    409: {
        "model": ErrorBody,
        "description": "Wrong experiment's state or episode status (`WrongState`, `EpisodeConflict`)",
    },
    413: {"model": ErrorBody, "description": "Body over the proxy's size limit (`RequestTooLarge`)"},
    422: {"model": ErrorBody, "description": "Malformed body; `fields` names the offending fields (`InvalidRequest`)"},
    500: {"model": ErrorBody, "description": "The store failed (`StoreError`)"},
    503: {"model": ErrorBody, "description": "Not now: the engine is not ready (`NotReady`, with Retry-After)"},
}
"""Error answers of every `/swarm/*` route."""

DATA_PLANE_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIErrorBody, "description": "Invalid request; `param` names the field"},
    401: {"model": OpenAIErrorBody, "description": "Unknown, ended or expired episode key (`invalid_api_key`)"},
    413: {"model": OpenAIErrorBody, "description": "Body over the proxy's size limit"},
    500: {"model": OpenAIErrorBody, "description": "The store could not record the call"},
    503: {
        "model": OpenAIErrorBody,
        "description": "The engine is not ROLLING, or no engine answers (with Retry-After)",
    },
}
"""Error answers of every `/v1/*` route."""
MODEL_NOT_FOUND_ERROR: dict[str, Any] = {"model": OpenAIErrorBody, "description": "No such model (`model_not_found`)"}
"""The 404 of `GET /v1/models/{model}`."""

_NUMBER = {"type": "number"}
_MAX_TOKENS = {"type": "integer", "minimum": MAX_TOKENS_RANGE[0], "maximum": MAX_TOKENS_RANGE[1]}
_TOOL_CALL = {
    "type": "object",
    "required": ["function"],
    "properties": {
        "id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "type": {"anyOf": [{"type": "string", "enum": ["function"]}, {"type": "null"}]},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
        },
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": list(ROLES)},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}]},
        "name": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "tool_call_id": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "tool_calls": {"anyOf": [{"type": "array", "items": _TOOL_CALL}, {"type": "null"}]},
    },
}


def _nullable(props: dict[str, Any]) -> dict[str, Any]:
    """Each optional property may also be null (the same as absent, as in OpenAI's API)."""
    return {name: {"anyOf": [schema, {"type": "null"}]} for name, schema in props.items()}


CHAT_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
        **_nullable(
            {
                "model": {"type": "string"},
                "stream": {"type": "boolean"},
                "n": {"type": "integer", "enum": [1]},
                "max_tokens": _MAX_TOKENS,
                "max_completion_tokens": _MAX_TOKENS,
                "temperature": {**_NUMBER, "minimum": TEMPERATURE_RANGE[0], "maximum": TEMPERATURE_RANGE[1]},
                "top_p": {**_NUMBER, "exclusiveMinimum": TOP_P_RANGE[0], "maximum": TOP_P_RANGE[1]},
                "seed": {"type": "integer", "minimum": SEED_RANGE[0], "maximum": SEED_RANGE[1]},
                "stop": {
                    "anyOf": [
                        {"type": "string", "minLength": 1},
                        {"type": "array", "maxItems": MAX_STOP_STRINGS, "items": {"type": "string", "minLength": 1}},
                    ]
                },
                "logprobs": {"type": "boolean"},
                "top_logprobs": {"type": "integer", "minimum": 0, "maximum": MAX_TOP_LOGPROBS},
                "tools": {"type": "array", "items": {"type": "object"}},
            }
        ),
    },
}
"""The chat-completions body the proxy accepts (the fields it checks; others pass through)."""

CHAT_ROUTE_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": CHAT_REQUEST_SCHEMA}}},
    "responses": {
        "200": {
            "description": "A chat completion, or with `stream` an SSE stream of chunks",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "description": "each SSE event: `data:` a JSON chunk, the last `data: [DONE]`",
                        "properties": {"data": {"type": "string"}},
                    }
                },
            },
        }
    },
}
"""`openapi_extra` of `POST /v1/chat/completions` (the route reads its body raw, to log it byte for byte)."""

MODELS_ROUTE_OPENAPI: dict[str, Any] = {
    "responses": {
        "200": {
            "description": "The models the episode may name",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
}
"""`openapi_extra` of `GET /v1/models`."""

MODEL_ROUTE_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": "model",
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": "A model name from `GET /v1/models`",
        }
    ],
    "responses": {"200": {"description": "The model", "content": {"application/json": {"schema": {"type": "object"}}}}},
}
"""`openapi_extra` of `GET /v1/models/{model}`."""

_TEXT_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": ["input_text", "output_text", "text"]},
        "text": {"type": "string"},
    },
}
_TEXT_OR_PARTS = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]}
_RESPONSES_ITEM = {
    "description": "a message, function_call or function_call_output item",
    "anyOf": [
        {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "type": {"type": "string", "enum": ["message"]},
                "role": {"type": "string", "enum": ["user", "assistant", "system", "developer"]},
                "content": _TEXT_OR_PARTS,
            },
        },
        {
            "type": "object",
            "required": ["type", "call_id", "name", "arguments"],
            "properties": {
                "type": {"type": "string", "enum": ["function_call"]},
                "call_id": {"type": "string"},
                "name": {"type": "string"},
                "arguments": {"type": "string"},
            },
        },
        {
            "type": "object",
            "required": ["type", "call_id", "output"],
            "properties": {
                "type": {"type": "string", "enum": ["function_call_output"]},
                "call_id": {"type": "string"},
                "output": _TEXT_OR_PARTS,
            },
        },
    ],
}
RESPONSES_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "input": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": _RESPONSES_ITEM}]},
        **_nullable(
            {
                "model": {"type": "string"},
                "instructions": {"type": "string"},
                "stream": {"type": "boolean"},
                "max_output_tokens": _MAX_TOKENS,
                "temperature": {**_NUMBER, "minimum": TEMPERATURE_RANGE[0], "maximum": TEMPERATURE_RANGE[1]},
                "top_p": {**_NUMBER, "exclusiveMinimum": TOP_P_RANGE[0], "maximum": TOP_P_RANGE[1]},
                "previous_response_id": {"type": "string"},
                "tools": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "name"],
                        "properties": {"type": {"type": "string", "enum": ["function"]}, "name": {"type": "string"}},
                    },
                },
            }
        ),
    },
}
"""The Responses body the proxy accepts (the fields it checks; built-in tools, background mode and file
inputs are refused naming the field)."""

RESPONSES_ROUTE_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": RESPONSES_REQUEST_SCHEMA}}},
    "responses": {
        "200": {
            "description": "A Response, or with `stream` an SSE stream of Responses events",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "object"}},
            },
        }
    },
}
"""`openapi_extra` of `POST /v1/responses`."""

MESSAGES_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": AnthropicErrorBody, "description": spec["description"]}
    for status, spec in DATA_PLANE_ERRORS.items()
}
"""Error answers of `/v1/messages`: the same statuses, in Anthropic's error shape."""

_BLOCK = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string", "enum": ["text", "tool_use", "tool_result"]}, "text": {"type": "string"}},
}
MESSAGES_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["max_tokens", "messages"],
    "properties": {
        "max_tokens": _MAX_TOKENS,
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "properties": {
                    "role": {"type": "string", "enum": ["user", "assistant"]},
                    "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _BLOCK}]},
                },
            },
        },
        **_nullable(
            {
                "model": {"type": "string"},
                "system": {"anyOf": [{"type": "string"}, {"type": "array", "items": _BLOCK}]},
                "stream": {"type": "boolean"},
                "temperature": {**_NUMBER, "minimum": TEMPERATURE_RANGE[0], "maximum": TEMPERATURE_RANGE[1]},
                "top_p": {**_NUMBER, "exclusiveMinimum": TOP_P_RANGE[0], "maximum": TOP_P_RANGE[1]},
                "stop_sequences": {
                    "type": "array",
                    "maxItems": MAX_STOP_STRINGS,
                    "items": {"type": "string", "minLength": 1},
                },
                "tools": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                },
            }
        ),
    },
}
"""The Messages body the proxy accepts (the fields it checks; server tools, images and documents are refused
naming the field)."""

MESSAGES_ROUTE_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": MESSAGES_REQUEST_SCHEMA}}},
    "responses": {
        "200": {
            "description": "A message, or with `stream` Anthropic's SSE events",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "text/event-stream": {"schema": {"type": "object"}},
            },
        }
    },
}
"""`openapi_extra` of `POST /v1/messages`."""

COUNT_TOKENS_ROUTE_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    **MESSAGES_REQUEST_SCHEMA,
                    "required": ["messages"],
                    "properties": {
                        k: v
                        for k, v in MESSAGES_REQUEST_SCHEMA["properties"].items()
                        if k not in ("max_tokens", "stream")
                    },
                }
            }
        },
    },
    "responses": {
        "200": {
            "description": "The prompt's token count with the served model's tokenizer and chat template",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["input_tokens"],
                        "properties": {"input_tokens": {"type": "integer"}},
                    }
                }
            },
        }
    },
}
"""`openapi_extra` of `POST /v1/messages/count_tokens`."""

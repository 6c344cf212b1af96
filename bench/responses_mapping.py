"""The Responses API mapping, side by side in one run: the proxy's own (`ResponsesRequest.to_chat`,
`ajet_proxy.dataplane.responses.shape`) against LiteLLM's Responses<->chat transformation, for the request
and for the answer of one agent turn (a tool call's output fed back). One JSON line per (method, direction):
microseconds per call; then the ratio.

Usage: python -m bench.responses_mapping [--iterations 2000]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ajet_proxy.dataplane.responses.protocol import ResponsesRequest, validate_responses
from ajet_proxy.dataplane.responses.shape import ResponsesShape
from bench.results import emit

TOOLS = [
    {
        "type": "function",
        "name": "add",
        "description": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    }
]
INPUT = [
    {"role": "user", "content": "what is 2+3?"},
    {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
    {"type": "function_call_output", "call_id": "c1", "output": "5"},
]
REQUEST = {"instructions": "Use the tools.", "tools": TOOLS, "max_output_tokens": 256, "temperature": 1.0}
ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "policy",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "logprobs": None,
            "message": {"role": "assistant", "content": "2 + 3 = 5."},
        }
    ],
    "usage": {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129},
}


def per_call_us(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    import orjson
    from litellm.responses.litellm_completion_transformation.transformation import (
        LiteLLMCompletionResponsesConfig as Lite,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=2000)
    n = ap.parse_args().iterations
    body = {"input": INPUT, **REQUEST}
    data = orjson.dumps(ANSWER)

    def shape(req: ResponsesRequest) -> ResponsesShape:
        return ResponsesShape(req, "resp_1")

    figures = {
        ("ajet", "request"): lambda: validate_responses(body).to_chat([]),
        ("litellm", "request"): lambda: Lite.transform_responses_api_request_to_chat_completion_request(
            model="openai/policy", input=INPUT, responses_api_request=REQUEST, custom_llm_provider="openai"
        ),
        ("ajet", "answer"): lambda: ResponsesShape(validate_responses(body), "resp_1").answer(
            200, data, orjson.loads(data)
        ),
        ("litellm", "answer"): lambda: orjson.dumps(
            Lite.transform_chat_completion_response_to_responses_api_response(
                request_input=INPUT, responses_api_request=REQUEST, chat_completion_response=orjson.loads(data)
            ).model_dump()
        ),
    }
    us = {}
    for (method, direction), fn in figures.items():
        us[method, direction] = per_call_us(fn, n)
        emit(
            "responses_mapping",
            {
                "figure": "responses_mapping_us",
                "method": method,
                "direction": direction,
                "us_per_call": round(us[method, direction], 1),
            },
        )
    for direction in ("request", "answer"):
        emit(
            "responses_mapping",
            {
                "figure": "responses_mapping_ratio",
                "direction": direction,
                "litellm_over_ajet": round(us["litellm", direction] / us["ajet", direction], 1),
            },
        )


if __name__ == "__main__":
    main()

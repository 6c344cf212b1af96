"""vLLM's OpenAI server whose chat answers say which policy version sampled which of their tokens.

Run by vLLM's own interpreter in place of `python -m vllm.entrypoints.openai.api_server` (same arguments) when a
job trains with partial rollouts (`VllmSettings.partial_rollouts`). vLLM 0.32 labels each output token with the
version `POST /update_weight_version` set (the trainer sets the policy version there at each update) and keeps the
spans in `CompletionOutput.weight_versions`, but its chat endpoint does not return them. This adds them
as the embedded engine does, as `policy_version_spans` (`[[offset, version], ...]`): on a plain answer, and on a
stream's chunk that ends the answer (its `finish_reason`); only when an update came mid-answer (two spans or more).
The proxy reads that field from either engine alike (`ajet_proxy.dataplane.tokens`).

It also keeps an adapter loaded in place from being read again at every step. vLLM 0.32 hands each request the
`LoRARequest` its name was last loaded with; one loaded with `load_inplace` makes the worker load the adapter from
that request's folder again at each step it runs in (`LRUCacheWorkerLoRAManager.add_adapter`). A request kept across
an update (`/pause?mode=keep`) so went on reading the previous step's folder: the old weights, token after token
(found by tests/vllm_real/test_vllm_partial.py). Here the name's request is stored without `load_inplace` once the
load is done: the worker holds the new weights under the same id, and every request, kept or new, runs on them.

This file imports nothing of AgentJet: vLLM's interpreter has only vLLM.
"""

from __future__ import annotations

import functools
import json
import runpy
from typing import Any, AsyncIterator, Optional


def spans_of_result(result: Any) -> Optional[list[list[int]]]:
    """`[[offset, version], ...]` of a finished `RequestOutput`'s first answer, when two versions or more sampled
    it and every label is a policy version (an integer); else None."""
    spans = getattr(result.outputs[0], "weight_versions", None) if result is not None and result.outputs else None
    if not spans or len(spans) < 2:
        return None
    try:
        return [[span.start, int(span.version)] for span in spans]
    except ValueError:  # a label the trainer did not set ("default": before its first update_weight_version)
        return None


class _Last:
    """The engine's results passed through, the last one kept."""

    def __init__(self, results: AsyncIterator[Any]):
        self.results, self.last = results, None

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for res in self.results:
            self.last = res
            yield res


def _full(original: Any) -> Any:
    @functools.wraps(original)
    async def full(self: Any, request: Any, result_generator: Any, *args: Any, **kwargs: Any) -> Any:
        seen = _Last(result_generator)
        response = await original(self, request, seen.__aiter__(), *args, **kwargs)
        spans = spans_of_result(seen.last)
        if spans is not None and hasattr(response, "choices"):
            response.policy_version_spans = spans  # vLLM's response models allow extra fields
        return response

    return full


def _stream(original: Any) -> Any:
    @functools.wraps(original)
    async def stream(self: Any, request: Any, result_generator: Any, *args: Any, **kwargs: Any) -> AsyncIterator[str]:
        seen = _Last(result_generator)
        async for event in original(self, request, seen.__aiter__(), *args, **kwargs):
            if '"finish_reason":"' in event and event.startswith("data: {"):  # the answer's last chunk
                spans = spans_of_result(seen.last)  # the finished result: its chunk is built after it came
                if spans is not None:
                    chunk = json.loads(event[len("data: ") :])
                    event = "data: " + json.dumps({**chunk, "policy_version_spans": spans}) + "\n\n"
            yield event

    return stream


def _loaded_once(original: Any) -> Any:
    @functools.wraps(original)
    async def load(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        import msgspec

        out = await original(self, request, *args, **kwargs)
        held = self.lora_requests.get(request.lora_name)
        if held is not None and held.load_inplace:  # loaded now: later requests must not load it again each step
            self.lora_requests[request.lora_name] = msgspec.structs.replace(held, load_inplace=False)
        return out

    return load


def patch() -> None:
    """Wrap vLLM's chat answer builders (plain and streamed) to add `policy_version_spans`, and its adapter loading
    to store an in-place load's request without `load_inplace`."""
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.models.serving import OpenAIServingModels

    serving: Any = OpenAIServingChat
    serving.chat_completion_full_generator = _full(serving.chat_completion_full_generator)
    serving.chat_completion_stream_generator = _stream(serving.chat_completion_stream_generator)
    models: Any = OpenAIServingModels
    models.load_lora_adapter = _loaded_once(models.load_lora_adapter)


if __name__ == "__main__":
    patch()
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)

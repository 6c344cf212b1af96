"""What data-plane tests compare the proxy with: the stub engine's own answer, and a call once it is in the store."""

from __future__ import annotations

import time

import httpx

from ajet_core.engine_answer import EngineAnswer
from ajet_proxy.dataplane.tokens import StreamAccumulator
from ajet_store import Store
from ajet_store.types import CallRecord
from tests.support.procs import Proc


def direct(stub: Proc, **body: object) -> EngineAnswer:
    """What the engine itself answers for the same request, with ids asked for."""
    body = {"model": "stub-model", "return_token_ids": True, "logprobs": True, **body}
    if body.get("stream"):
        acc = StreamAccumulator()
        with httpx.stream("POST", stub.url + "/v1/chat/completions", json=body) as r:
            for chunk in r.iter_bytes():
                acc.feed(chunk)
        return acc.result()
    return EngineAnswer.model_validate(httpx.post(stub.url + "/v1/chat/completions", json=body).json())


def flushed_calls(store: Store, uuid: str, n: int, timeout: float = 5.0) -> list[CallRecord]:
    """The episode's calls once `n` are in the store (or what is there after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        calls = store.calls(uuid)
        if len(calls) >= n or time.monotonic() > deadline:
            return calls
        time.sleep(0.05)

"""A client that leaves mid-answer frees its row in the embedded engine at the next token: the batch is held
between two tokens (the model's forward pass waits on a gate), the client closes its connection, and once the
engine has seen it go the batch goes on: the row ends (`abort`) having sampled at most the one token in flight
when its client left, far short of its `max_tokens`; another row of the same batch is served whole."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from ajet import AgentJetJob
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.scripted_model import GatedModel, ScriptedModel

LONG = 400
"""The answer the client would have waited for (tokens)."""


@pytest.fixture
def gated():
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    scripted = ScriptedModel(model, [])
    gate = GatedModel(scripted, stop_at=6)  # the pair's prefill, then held before the 6th pass
    letter = tok.encode("a", add_special_tokens=False)[0]
    scripted.reset([letter] * LONG, [letter] * LONG)  # no end of turn: only max_tokens or the client ends them
    eng = EmbeddedEngine(gate, tok, max_tokens_cap=LONG)
    start_batching = eng.batcher.start
    eng.batcher.start = lambda: None  # the HTTP side alone: requests queue until the test starts the batcher
    url = eng.start()
    yield eng, gate, url, start_batching
    gate.gate.set()
    eng.stop()


def _raw_request(url: str, body: dict, key: str = "") -> socket.socket:
    """An HTTP request on a socket of its own, which the test closes as a client that leaves does."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)))
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n"
    sock.sendall(head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def _wait(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_client_that_leaves_frees_its_row_at_the_next_token(gated, stream):
    eng, gate, url, start_batching = gated
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": LONG, "stream": stream}
    stays: dict = {}
    plain = body | {"stream": False}
    staying = threading.Thread(target=lambda: stays.update(httpx.post(url + "/chat/completions", json=plain).json()))
    leaving = _raw_request(url, body)
    staying.start()
    _wait(lambda: eng.batcher._q.qsize() == 2, "the pair never queued")
    start_batching()  # both waiting: one batch
    assert gate.reached.wait(60)  # the pair's batch, held between two tokens
    assert len(eng.batcher.running) == 2
    leaving.close()
    _wait(lambda: any(p.req.cancelled.is_set() for p in eng.batcher.running), "the engine never saw the client go")
    gate.gate.set()
    staying.join(120)
    assert stays["choices"][0]["finish_reason"] == "length" and stays["usage"]["completion_tokens"] == LONG
    assert eng.batcher.stats["aborted"] == 1 and eng.batcher.stats["aborted_late_tokens_max"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_agent_that_leaves_the_proxy_frees_the_engine_row_and_is_logged_as_gone(gated, tmp_path, stream):
    """The same through a real proxy: the agent's connection to the proxy closes; the proxy closes its own to
    the engine (a plain call's wait is watched, a stream is cancelled), the engine frees the row at the next
    token, and the call is in the store as cut off by its client (never trained)."""
    from tests.support.rolling import rolling_proxy

    eng, gate, url, start_batching = gated
    start_batching()
    with rolling_proxy(tmp_path, url.removesuffix("/v1")) as (client, store, proxy_url):
        uuid, creds = client.begin_episode()
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": LONG, "stream": stream}
        leaving = _raw_request(proxy_url + "/v1", body, creds.api_key)
        assert gate.reached.wait(60)
        leaving.close()
        _wait(lambda: any(p.req.cancelled.is_set() for p in eng.batcher.running), "the engine never saw the proxy go")
        gate.gate.set()
        _wait(lambda: eng.batcher.stats["aborted"] == 1, "the row was not aborted")
        assert eng.batcher.stats["aborted_late_tokens_max"] <= 1
        _wait(lambda: store.calls(uuid), "the call was not logged")
        (call,) = store.calls(uuid)
        assert call.client_gone and not call.trainable

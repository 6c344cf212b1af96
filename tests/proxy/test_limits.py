"""Bounded input: a body over the size limit is 413 on every route, a chat body too deep or with too many
messages is refused naming the limit; nothing of a refused call is logged, and no sequence number is used."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from ajet import AgentJetJob, SwarmClient
from ajet_proxy.limits import DEFAULT_LIMITS, json_depth
from tests.support.rolling import ensure_rolling

MSGS = [{"role": "user", "content": "hi"}]
BIG = 9 * 1024 * 1024


def test_json_depth_is_iterative():
    assert json_depth(1) == 0 and json_depth({"a": 1}) == 1 and json_depth({"a": [{"b": []}]}) == 4
    deep: list = []
    for _ in range(5000):  # far past Python's recursion limit
        deep = [deep]
    assert json_depth(deep) == 5001


@pytest.fixture
def episode(proxy, store, stub):
    client = SwarmClient(proxy.url)
    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2))
    uuid, creds = client.begin_episode()
    yield client, uuid, {"Authorization": f"Bearer {creds.api_key}"}
    client.abort_episode(uuid)
    client.close()


def test_a_body_over_the_limit_is_413_on_every_route(proxy, episode):
    _client, _uuid, auth = episode
    for path, headers in (("/v1/chat/completions", auth), ("/swarm/end_episode", {})):
        r = httpx.post(
            proxy.url + path, content=b"x" * BIG, headers={**headers, "content-type": "application/json"}, timeout=60
        )
        code = r.json()["error"]["code"] if path.startswith("/v1/") else r.json()["error"]
        assert r.status_code == 413 and code == "RequestTooLarge", (path, r.text[:200])

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(BIG // 65536):
            yield b"x" * 65536

    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=chunks(),
        headers={**auth, "content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "RequestTooLarge"


def test_deep_or_huge_chat_bodies_are_refused_and_use_no_sequence_number(proxy, store, episode):
    client, uuid, auth = episode
    limits = DEFAULT_LIMITS
    deep: dict = {}
    for _ in range(300):  # an extra field nested 300 levels deep (orjson parses it, cannot dump it)
        deep = {"x": deep}
    for body, field in (
        ({"messages": MSGS, "extra": deep}, "body"),
        ({"messages": MSGS * (limits.max_messages + 1)}, "messages"),
    ):
        r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text[:300]
    ok = httpx.post(
        proxy.url + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 2}, headers=auth, timeout=60
    )
    assert ok.status_code == 200
    client.get_episode(uuid)  # flushed
    assert [c.seq for c in store.calls(uuid)] == [0]  # the refused calls were never numbered nor logged


def test_a_plain_text_backend_error_is_not_relabelled_json(proxy, store, episode):
    client, uuid, auth = episode
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"messages": MSGS, "stub_plain_error": "the engine fell over"},
        headers=auth,
        timeout=60,
    )
    assert r.status_code == 500 and r.text == "the engine fell over"
    assert r.headers["content-type"].startswith("text/plain")
    client.get_episode(uuid)
    (call,) = store.calls(uuid)
    assert call.error and "the engine fell over" in call.error  # logged as the failed call it was


def test_a_client_that_leaves_a_stream_early_is_logged_as_such(proxy, store, episode):
    client, uuid, auth = episode
    body = {"messages": MSGS, "stream": True, "stub_chunk_delay": 0.5}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=60) as r:
        first = next(r.iter_bytes())
        assert first.startswith(b"data: ")
    # the connection is closed mid-stream; the proxy notices on its next write
    deadline = time.monotonic() + 15
    while not store.calls(uuid):
        assert time.monotonic() < deadline, "the abandoned stream was never logged"
        time.sleep(0.2)
    (call,) = store.calls(uuid)
    assert call.stream and call.error == "the client disconnected before [DONE]"


def test_no_token_key_or_prompt_in_the_proxy_log_at_info(tmp_path, stub):
    from ajet import Task, WorkflowOutput
    from ajet_store import Store, sqlite_url
    from tests.support.procs import start_proxy

    url, token, prompt = sqlite_url(tmp_path / "log.db"), "tok-5ecret-xyz", "a very private prompt 7c1e"
    px = start_proxy(tmp_path, url, "--swarm-token", token, "--log-level", "info")
    st = Store(url)
    client = SwarmClient(px.url, swarm_token=token)
    try:
        ensure_rolling(client, st, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2))
        uuid, creds = client.begin_episode()
        r = httpx.post(
            px.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": prompt}]},
            headers={"Authorization": f"Bearer {creds.api_key}"},
            timeout=60,
        )
        assert r.status_code == 200
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
        log = px.log_tail(10**7)
    finally:
        client.close()
        px.close()
        st.close()
    assert "proxy ready" in log  # INFO lines were written
    assert token not in log and creds.api_key not in log and prompt not in log


@pytest.mark.parametrize("delay", [0.002, 0.02])
def test_a_client_that_leaves_a_fast_stream_after_two_events_is_never_trained(proxy, store, episode, delay):
    """A stream the client left after two events, on an engine that keeps sending fast (2 ms a token, the
    embedded engine's pace): stored as cut short by the client, never as a normal answer. (A stream whose last byte
    was written before the client left cannot be told from one it read; see `ajet_proxy.dataplane.chat_path`.)"""
    client, uuid, auth = episode
    body = {"messages": MSGS, "stream": True, "stub_chunk_delay": delay, "max_tokens": 64}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=60) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ") and next(lines) == ""
        assert next(lines).startswith("data: ")
    deadline = time.monotonic() + 15
    while not store.calls(uuid):
        assert time.monotonic() < deadline, "the abandoned stream was never logged"
        time.sleep(0.2)
    (call,) = store.calls(uuid)
    assert call.stream and call.client_gone and call.error == "the client disconnected before [DONE]", call
    assert not call.trainable


def test_a_plain_call_whose_client_left_before_the_answer_is_never_trained(proxy, store, episode):
    """The client's timeout fired while the engine was still answering: the proxy stops waiting (it closes its
    request to the engine, which frees the row: tests/trainer/embedded/test_engine_abort.py) and stores the call as cut
    off by its client, with no answer."""
    client, uuid, auth = episode
    body = {"messages": MSGS, "stub_delay": 1.0}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=0.3)
    deadline = time.monotonic() + 15
    while not store.calls(uuid):
        assert time.monotonic() < deadline, "the abandoned call was never logged"
        time.sleep(0.2)
    (call,) = store.calls(uuid)
    assert call.client_gone and call.error == "the client disconnected before the answer" and not call.trainable
    assert call.completion_ids is None and call.response is None  # never waited for
    # the call is over: the episode idles again, so it expires on its timeout (it stayed in flight forever, and a
    # drain waited on it: the distributed tutorial's killed clients held a step for minutes)
    time.sleep(0.5)
    (ep,) = [e for e in client.get_rollout_stat().open_episodes if e.episode_uuid == uuid]
    assert ep.idle_s >= 0.4, ep


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_prompt_over_the_jobs_max_prompt_length_is_refused_at_call_time(proxy, store, episode, stream):
    """An engine that renders the prompt itself (vLLM, this stub) does not know the job's limit (3,000 tokens
    here): the proxy refuses what the trainer would otherwise cut from the left, with OpenAI's
    `context_length_exceeded`, and logs the call as refused (never trained)."""
    client, uuid, auth = episode
    body = {"messages": [{"role": "user", "content": "z" * 3_100}], "stream": stream}
    if stream:
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=60) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert len(events) == 1, events  # the error alone: nothing of the answer was passed on
        error = json.loads(events[0][6:])["error"]
    else:
        r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=auth, timeout=60)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and "max_prompt_length" in error["message"], error
    assert "3000 tokens" in error["message"]
    client.get_episode(uuid)
    deadline = time.monotonic() + 15
    while not store.calls(uuid):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (call,) = store.calls(uuid)
    assert call.error is not None and "max_prompt_length" in call.error and not call.trainable
    ok = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": MSGS}, headers=auth, timeout=60)
    assert ok.status_code == 200  # the episode goes on

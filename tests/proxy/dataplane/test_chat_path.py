"""The one chat path over real HTTP: keys, exact token ids (plain and streamed), numbering, streams cut short,
routing to the engines and failover."""

import time

import httpx
import openai
import orjson
import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import Store, sqlite_url
from ajet_store.types import RegisteredEngine
from tests.support.calls import direct, flushed_calls
from tests.support.procs import start_proxy, start_stub
from tests.support.rolling import ensure_rolling, wait_state
from tests.support.stub_proxy import proxy_on_stub

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "look up",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
    }
]


def test_plain_call_logs_exact_ids(client, store, stub):
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    r = oc.chat.completions.create(model="anything-at-all", messages=MSGS, seed=3, max_tokens=12)
    want = direct(stub, messages=MSGS, seed=3, max_tokens=12)
    call = flushed_calls(store, uuid, 1)[0]
    assert call.prompt_ids == want.prompt_ids and call.completion_ids == want.completion_ids
    assert call.logprobs == want.logprobs and len(call.logprobs) == len(call.completion_ids)
    assert call.finish_reason == "stop" and call.engine == "stub-0" and not call.stream
    assert r.choices[0].message.content == want.content
    assert orjson.loads(call.request)["model"] == "anything-at-all"  # the agent's request, as sent


def test_an_engine_without_tokenize_falls_back_and_the_agent_never_notices(client, store, stub):
    """An OpenAI-compatible engine that has no `/tokenize` (the stub, as an older server): a call that continues a
    turn cannot have its new messages tokenized, so it is rendered whole, labelled `fallback:tokenize_failed`,
    answered as ever, and its episode trains as two sequences."""
    from ajet_trainer.samples import episode_sequences

    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    first = oc.chat.completions.create(model="m", messages=MSGS, seed=1, max_tokens=8).choices[0].message
    again = [*MSGS, {"role": "assistant", "content": first.content}, {"role": "user", "content": "and then?"}]
    second = oc.chat.completions.create(model="m", messages=again, seed=2, max_tokens=8)
    assert second.choices[0].message.content
    calls = flushed_calls(store, uuid, 2)
    assert [c.token_history for c in calls] == ["first", "fallback:tokenize_failed"]
    assert calls[1].prompt_ids == direct(stub, messages=again, seed=2, max_tokens=8).prompt_ids  # rendered whole
    _seqs, merged, starts = episode_sequences(calls, uuid, "t")
    assert merged == 0 and starts == {"first": 1, "fallback:tokenize_failed": 1}


def test_streamed_call_logs_exact_ids_and_streams(client, store, stub):
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    chunks = list(oc.chat.completions.create(model="m", messages=MSGS, seed=5, max_tokens=20, stream=True))
    assert len(chunks) > 5  # real streaming: one chunk per token, not one blob
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    want = direct(stub, messages=MSGS, seed=5, max_tokens=20, stream=True)
    call = flushed_calls(store, uuid, 1)[0]
    assert call.stream and text == want.content
    assert call.prompt_ids == want.prompt_ids and call.completion_ids == want.completion_ids
    assert call.logprobs == want.logprobs


def test_token_ids_and_policy_version_only_when_asked(client, store, stub):
    """The proxy asks the engine for ids to log them; the agent gets them only with `return_token_ids` (vLLM's
    flag), plain and streamed, and the store holds them either way."""
    uuid, creds = client.begin_episode()
    url, headers = creds.base_url + "/chat/completions", {"Authorization": f"Bearer {creds.api_key}"}
    body = {"model": "m", "messages": MSGS, "seed": 3, "max_tokens": 12}
    plain = httpx.post(url, json=body, headers=headers).json()
    asked = httpx.post(url, json={**body, "return_token_ids": True}, headers=headers).json()
    assert "prompt_token_ids" not in plain and "policy_version" not in plain and "token_ids" not in plain["choices"][0]
    want = direct(stub, **body)
    assert asked["prompt_token_ids"] == want.prompt_ids and asked["choices"][0]["token_ids"] == want.completion_ids
    assert asked["choices"][0]["message"] == plain["choices"][0]["message"]
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers) as r:
        events = [orjson.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert len(events) > 3 and not any("prompt_token_ids" in e or "token_ids" in e["choices"][0] for e in events)
    calls = flushed_calls(store, uuid, 3)
    assert [c.completion_ids for c in calls] == [want.completion_ids] * 3  # logged whatever the client asked


def test_keys_valid_ended_expired_and_foreign(client, proxy, store):
    a_uuid, a = client.begin_episode()
    b_uuid, b = client.begin_episode(discard_episode_timeout=1.0)
    body = {"model": "m", "messages": MSGS}

    def post(key):
        return httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})

    assert post(a.api_key).status_code == 200
    assert post(b.api_key).status_code == 200
    # each key logs into its own episode only
    assert len(flushed_calls(store, a_uuid, 1)) == 1 and len(flushed_calls(store, b_uuid, 1)) == 1

    def refused(r: httpx.Response) -> str:
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text
        return r.json()["error"]["message"]

    assert refused(post("ajet-ep-forged")).startswith("unknown episode key")
    assert refused(httpx.post(proxy.url + "/v1/chat/completions", json=body)).startswith("no episode key")
    c_uuid, c = client.begin_episode()
    client.abort_episode(c_uuid)
    assert refused(post(c.api_key)).startswith(
        f"episode {c_uuid} was aborted (abort_episode, or the engine was stopped)"
    )
    client.end_episode(Task(task_id="k"), a_uuid, WorkflowOutput(reward=1))
    assert refused(post(a.api_key)) == f"episode {a_uuid} has ended (end_episode); its key no longer works"
    time.sleep(3.0)  # b idles past its 1 s timeout; housekeeping runs every second
    assert refused(post(b.api_key)) == f"episode {b_uuid} expired after 1 s without a call; its key no longer works"
    assert store.get_episode(b_uuid).status == EpisodeStatus.EXPIRED
    with pytest.raises(Exception, match="expired"):
        client.end_episode(Task(task_id="k"), b_uuid, WorkflowOutput(reward=1))
    assert httpx.get(proxy.url + "/v1/models", headers={"Authorization": f"Bearer {a.api_key}"}).status_code == 401


def test_calls_outside_rolling_are_503(client, proxy, store, stub):
    uuid, creds = client.begin_episode()
    store.transition(ExperimentState.WEIGHT_SYNCING)
    wait_state(client, ExperimentState.WEIGHT_SYNCING)
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"messages": MSGS},
        headers={"Authorization": f"Bearer {creds.api_key}"},
    )
    error = r.json()["error"]
    assert r.status_code == 503 and error["code"] == "NotReady" and "retry-after" in r.headers
    assert "WEIGHT_SYNCING" in error["message"] and error["type"] == "server_error"
    store.transition(ExperimentState.ROLLING)
    wait_state(client, ExperimentState.ROLLING)


def test_a_call_refused_before_the_engine_takes_no_call_number(module_tmp):
    """While no engine is registered (a trainer restarting), a call is refused with a 503 before it reaches an
    engine: it must take no call number, or the episode's numbering has a gap and it is thrown away as if a call
    had been lost (issue 30, round two: 'calls numbered up to 2 but only 1 stored')."""
    with proxy_on_stub(module_tmp, "refused") as sp:
        st, stub, c = sp.store, sp.stub, sp.client
        uuid, creds = c.begin_episode()
        oc = creds.as_openai_client(max_retries=0)
        oc.chat.completions.create(model="m", messages=MSGS)
        served = lambda: {m.id for m in oc.models.list()}  # noqa: E731 - the engines the proxy routes to
        st.remove_engines()  # the trainer went down: the proxy reloads its router within its poll
        deadline = time.monotonic() + 10
        while "stub-model" in served() and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(2):
            with pytest.raises(openai.APIStatusError) as refused:
                oc.chat.completions.create(model="m", messages=MSGS)
            assert refused.value.status_code == 503 and "no engine" in str(refused.value)
        st.register_engines([RegisteredEngine("stub-0", stub.url + "/v1", "stub-model", 0)])
        while "stub-model" not in served() and time.monotonic() < deadline:
            time.sleep(0.05)
        oc.chat.completions.create(model="m", messages=MSGS)
        c.end_episode(Task(task_id="x"), uuid, WorkflowOutput(reward=1))
        assert [call.seq for call in st.calls(uuid)] == [0, 1]
        row = st.get_episode(uuid)
        assert not row.untrainable, row.untrainable_reason
        assert [p.uuid for p in st.pool_episodes()] == [uuid]


def test_a_stream_the_engine_cut_ends_with_the_apis_error_event(client, proxy, store):
    """The engine dies after two chunks: the client gets the chunks, then an OpenAI error event, and a complete
    chunked body (aiohttp's ClientPayloadError used to escape the relay: a truncated body, no reason); the call is
    logged as broken off, never as an answer."""
    uuid, creds = client.begin_episode()
    body = {"messages": MSGS, "stream": True, "stub_cut_after": 2}
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {creds.api_key}"}
    ) as r:
        events = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 3 and "[DONE]" not in events
    error = orjson.loads(events[-1])["error"]
    assert error["code"] == "EngineUnavailable" and "broke off" in error["message"], error
    [call] = flushed_calls(store, uuid, 1)
    assert call.error is not None and "broke off" in call.error and not call.trainable


def test_backend_without_token_ids_marks_episode_untrainable(module_tmp):
    with proxy_on_stub(module_tmp, "noids", "--no-token-ids") as sp:
        st, c = sp.store, sp.client
        uuid, creds = c.begin_episode()
        r = creds.as_openai_client().chat.completions.create(model="m", messages=MSGS)
        assert r.choices[0].message.content  # the agent still gets its answer
        c.end_episode(Task(task_id="x"), uuid, WorkflowOutput(reward=1))
        row = st.get_episode(uuid)
        assert row.untrainable and "no token ids" in row.untrainable_reason
        assert st.calls(uuid)[0].completion_ids is None  # never re-tokenised
        assert st.pool_episodes() == []


def test_sticky_routing_and_failover(module_tmp):
    stubs = [start_stub(module_tmp, "--model", f"m{i}") for i in range(3)]
    url = sqlite_url(module_tmp / "route.db")
    px = start_proxy(module_tmp, url)
    st = Store(url)
    try:
        c = SwarmClient(px.url)
        c.sync_train_config(AgentJetJob(batch_size=1, num_repeat=1))
        c.start_engine()
        for i, s in enumerate(stubs):
            st.register_engines([RegisteredEngine(f"d{i}", s.url + "/v1", f"m{i}", 0)])
        st.transition(ExperimentState.ROLLING)
        wait_state(c, ExperimentState.ROLLING)
        time.sleep(0.5)
        used = set()
        for _ in range(6):
            uuid, creds = c.begin_episode()
            oc = creds.as_openai_client()
            for _ in range(3):
                oc.chat.completions.create(model="m", messages=MSGS)
            deps = {call.engine for call in flushed_calls(st, uuid, 3)}
            assert len(deps) == 1  # the episode stuck to one engine
            used |= deps
        assert len(used) >= 2  # LiteLLM spread episodes over the group
        uuid, creds = c.begin_episode()
        oc = creds.as_openai_client(max_retries=0)
        oc.chat.completions.create(model="m", messages=MSGS)
        first = flushed_calls(st, uuid, 1)[0].engine
        stubs[int(first[1:])].kill()  # the sticky engine dies
        r = oc.chat.completions.create(model="m", messages=MSGS)
        assert r.choices[0].message.content
        second = flushed_calls(st, uuid, 2)[1].engine
        assert second != first
        for s in stubs:
            s.close()  # every engine gone (a trainer restarting): retry later, not a hard failure
        r = httpx.post(
            px.url + "/v1/chat/completions",
            json={"messages": MSGS},
            headers={"Authorization": f"Bearer {creds.api_key}"},
        )
        assert (
            r.status_code == 503
            and r.headers["retry-after"] == "2"
            and r.json()["error"]["code"] == "EngineUnavailable"
        )
    finally:
        px.close()
        st.close()
        for s in stubs:
            s.close()


def test_litellm_transport_switch(module_tmp, stub):
    url = sqlite_url(module_tmp / "litellm.db")
    px = start_proxy(module_tmp, url, "--transport", "litellm")
    st = Store(url)
    try:
        c = SwarmClient(px.url)
        ensure_rolling(c, st, stub.url)
        uuid, creds = c.begin_episode()
        oc = creds.as_openai_client()
        r = oc.chat.completions.create(model="m", messages=MSGS, seed=3, max_tokens=12)
        want = direct(stub, messages=MSGS, seed=3, max_tokens=12)
        assert r.choices[0].message.content == want.content
        call = flushed_calls(st, uuid, 1)[0]
        assert call.prompt_ids == want.prompt_ids and call.completion_ids == want.completion_ids
        # streamed through LiteLLM: whatever ids survive its stream wrapper are the engine's exact ids
        text = "".join(
            ch.choices[0].delta.content or ""
            for ch in oc.chat.completions.create(model="m", messages=MSGS, stream=True, seed=3, max_tokens=12)
            if ch.choices
        )
        assert text == want.content
        c.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1))
        calls = st.calls(uuid)
        assert [(x.seq, x.stream, x.error) for x in calls] == [(0, False, None), (1, True, None)]
        assert calls[1].completion_ids == want.completion_ids
        if calls[1].prompt_ids is None:  # dropped by LiteLLM: flagged, never guessed
            assert st.get_episode(uuid).untrainable
        else:
            assert calls[1].prompt_ids == want.prompt_ids and not st.get_episode(uuid).untrainable
    finally:
        px.close()
        st.close()


class DroppingForwarder:
    """A TCP forwarder in front of an engine that drops its first `drops` connections once a request arrives on them
    (an engine under load resetting a connection, a pooled keep-alive it closed), and forwards the rest."""

    def __init__(self, target_port: int, drops: int):
        import socket
        import threading

        self.target, self.drops, self.accepted = target_port, drops, 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import socket
        import threading

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drops:
                conn.recv(65536)  # the request arrives, then the connection is gone
                conn.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(2)
                except OSError:
                    pass

    def close(self) -> None:
        self.server.close()


def test_an_engine_that_drops_a_connection_is_not_dead(tmp_path):
    """Round three: a busy vLLM engine that dropped a connection answered 503 "no engine reachable" and was cooled
    down. A connection the engine took and dropped is sent once more on a fresh one: the call is answered, once."""
    from urllib.parse import urlparse

    stub = start_stub(tmp_path)
    fwd = DroppingForwarder(urlparse(stub.url).port, drops=1)
    url = sqlite_url(tmp_path / "drops.db")
    proxy, store = start_proxy(tmp_path, url), Store(url)
    try:
        client = SwarmClient(proxy.url)
        ensure_rolling(client, store, f"http://127.0.0.1:{fwd.port}")
        uuid, creds = client.begin_episode()
        r = creds.as_openai_client(max_retries=0).chat.completions.create(model="m", messages=MSGS, max_tokens=4)
        assert r.choices[0].message.content is not None
        calls = flushed_calls(store, uuid, 1)
        assert len(calls) == 1 and calls[0].error is None and fwd.accepted == 2
        assert "dropped the connection" in proxy.log_tail() and "cooling down" not in proxy.log_tail()
        client.close()
    finally:
        proxy.close()
        store.close()
        fwd.close()
        stub.close()

"""The data plane over real HTTP: keys, exact token ids (plain and streamed), tools, routing."""

import time

import httpx
import openai
import orjson
import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import Store, sqlite_url
from ajet_store.types import RegisteredEngine
from tests.support.procs import start_proxy, start_stub
from tests.support.rolling import ensure_rolling, make_rolling, wait_state
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


@pytest.fixture(scope="module")
def client(proxy, store, stub):
    c = SwarmClient(proxy.url)
    ensure_rolling(c, store, stub.url)
    yield c
    c.close()


def direct(stub, **body):
    """What the backend itself answers for the same request, with ids asked for."""
    body = {"model": "stub-model", "return_token_ids": True, "logprobs": True, **body}
    if body.get("stream"):
        from ajet_proxy.dataplane.tokens import StreamAccumulator

        acc = StreamAccumulator()
        with httpx.stream("POST", stub.url + "/v1/chat/completions", json=body) as r:
            for chunk in r.iter_bytes():
                acc.feed(chunk)
        return acc.result()
    from ajet_proxy.dataplane.tokens import extract_response

    return extract_response(httpx.post(stub.url + "/v1/chat/completions", json=body).json())


def flushed_calls(store, uuid, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        calls = store.calls(uuid)
        if len(calls) >= n or time.monotonic() > deadline:
            return calls
        time.sleep(0.05)


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
    """The proxy asks the backend for ids to log them; the agent gets them only with `return_token_ids` (vLLM's
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


def test_tool_calls_pass_through(client, store):
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    r = oc.chat.completions.create(model="m", messages=[{"role": "user", "content": "CALL_TOOL please"}], tools=TOOLS)
    tc = r.choices[0].message.tool_calls[0]
    assert tc.function.name == "lookup" and r.choices[0].finish_reason == "tool_calls"
    msgs = [
        {"role": "user", "content": "CALL_TOOL please"},
        {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
        {"role": "tool", "tool_call_id": tc.id, "content": "42"},
    ]
    s = list(
        oc.chat.completions.create(
            model="m", messages=msgs + [{"role": "user", "content": "CALL_TOOL again"}], tools=TOOLS, stream=True
        )
    )
    assert any(c.choices and c.choices[0].delta.tool_calls for c in s)
    calls = flushed_calls(store, uuid, 2)
    assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls"]
    assert calls[1].prompt_ids[: len(calls[0].prompt_ids)] != []  # both logged with ids
    assert all(c.completion_ids for c in calls)


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


def test_models_route(client, proxy):
    _, creds = client.begin_episode()
    oc = creds.as_openai_client()
    ids = [m.id for m in oc.models.list().data]
    assert ids == ["policy", "stub-model"]
    assert oc.models.retrieve("policy").id == "policy" and oc.models.retrieve("stub-model").id == "stub-model"
    with pytest.raises(openai.NotFoundError) as err:
        oc.models.retrieve("gpt-9")
    assert err.value.code == "model_not_found" and "gpt-9" in err.value.message


def test_an_engine_model_named_policy_is_listed_once(module_tmp, stub):
    db = sqlite_url(module_tmp / "policy-named.db")
    store = Store(db)
    proxy = start_proxy(module_tmp, db)
    try:
        c = SwarmClient(proxy.url)
        c.sync_train_config(AgentJetJob(batch_size=2, num_repeat=2))
        c.start_engine()
        make_rolling(store, stub.url, model="policy")
        wait_state(c, ExperimentState.ROLLING)
        _, creds = c.begin_episode()
        assert [m.id for m in creds.as_openai_client().models.list().data] == ["policy"]
        c.close()
    finally:
        proxy.close()
        store.close()


def test_logprobs_reach_the_client_only_when_asked_and_are_always_logged(client, store):
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    plain = oc.chat.completions.create(model="m", messages=MSGS, seed=1, max_tokens=6)
    streamed = list(oc.chat.completions.create(model="m", messages=MSGS, seed=1, max_tokens=6, stream=True))
    asked = oc.chat.completions.create(model="m", messages=MSGS, seed=1, max_tokens=6, logprobs=True)
    assert plain.choices[0].logprobs is None
    assert all(c.choices[0].logprobs is None for c in streamed if c.choices)
    assert asked.choices[0].logprobs is not None and asked.choices[0].logprobs.content
    calls = flushed_calls(store, uuid, 3)
    assert len(calls) == 3 and all(c.logprobs and len(c.logprobs) == len(c.completion_ids) for c in calls)


_USER = '"messages": [{"role": "user", "content": "x"}]'


@pytest.mark.parametrize(
    "raw,field",
    [
        (b"{nope", "body"),
        (b"[1, 2]", "body"),
        (b'{"model": "m"}', "messages"),
        (b'{"messages": []}', "messages"),
        (b'{"messages": [{"content": "x"}]}', "messages.0.role"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "messages.0.content"),
        (b'{"messages": [{"role": "user", "content": [1]}]}', "messages.0.content"),
        *[
            (("{" + _USER + ", " + extra + "}").encode(), field)
            for extra, field in [
                ('"n": 2', "n"),
                ('"stream": "yes"', "stream"),
                ('"max_tokens": "x"', "max_tokens"),
                ('"max_tokens": 0', "max_tokens"),
                ('"max_tokens": -5', "max_tokens"),
                ('"max_tokens": true', "max_tokens"),
                ('"temperature": "nan"', "temperature"),
                ('"temperature": NaN', "body"),
                ('"temperature": 1e400', "body"),
                ('"temperature": -1', "temperature"),
                ('"top_p": 0', "top_p"),
                ('"seed": "abc"', "seed"),
                ('"seed": 1180591620717411303424', "seed"),
                ('"seed": 1.5', "seed"),
                ('"stop": [1]', "stop"),
                ('"stop": ""', "stop"),
                ('"logprobs": "yes"', "logprobs"),
                ('"top_logprobs": 21', "top_logprobs"),
                ('"tools": {"a": 1}', "tools"),
                ('"tool_choice": "always"', "tool_choice"),
                # OpenAI refuses a tool choice with no tools (any value); the proxy passed it on
                ('"tool_choice": "required"', "tool_choice"),
                ('"tool_choice": "auto"', "tool_choice"),
                ('"tool_choice": "required", "tools": []', "tool_choice"),
                ('"return_token_ids": "yes"', "return_token_ids"),
                ('"model": 5', "model"),
                # only the proxy sends a token prompt (the episode's history): an agent's would replace its messages
                ('"kv_transfer_params": {"prompt_token_ids": [1, 2]}', "kv_transfer_params"),
            ]
        ],
        *[
            (('{"messages": [{"role": "user", "content": [' + part + "]}]}").encode(), field)
            for part, field in [
                # the engines serve text: such a part was dropped without a word
                ('{"type": "image_url", "image_url": {"url": "http://x/y.png"}}', "messages.0.content.0.type"),
                ('{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}', "messages.0.content.0.type"),
            ]
        ],
    ],
)
def test_malformed_chat_bodies_are_400_naming_the_param(client, proxy, raw, field):
    """OpenAI's error object and status, so every agent framework shows the reason."""
    _, creds = client.begin_episode()
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {creds.api_key}", "content-type": "application/json"},
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and error["type"] == "invalid_request_error" and error["code"] == "InvalidRequest"
    assert error["message"].startswith(field), error


def test_the_openai_sdk_carries_the_reason(client, proxy):
    import openai

    _, creds = client.begin_episode()
    with pytest.raises(openai.BadRequestError) as info:
        creds.as_openai_client().chat.completions.create(model="policy", messages=MSGS, temperature=7)
    assert info.value.code == "InvalidRequest" and info.value.param == "temperature"
    assert "temperature: must be in [0.0, 2.0]" in info.value.message
    bad = openai.OpenAI(base_url=proxy.url + "/v1", api_key="ajet-ep-forged", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as auth:
        bad.chat.completions.create(model="policy", messages=MSGS)
    assert auth.value.code == "invalid_api_key" and "unknown episode key" in auth.value.message


def test_unknown_routes_answer_in_the_routes_error_shape(proxy):
    r = httpx.post(proxy.url + "/v1/responsez", json={})
    assert r.status_code == 404 and r.json()["error"]["code"] == "RouteNotFound"
    r = httpx.get(proxy.url + "/swarm/nope")
    assert r.status_code == 404 and r.json() == {
        "error": "RouteNotFound",
        "detail": "no route GET /swarm/nope",
        "fields": [],
    }
    r = httpx.get(proxy.url + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "MethodNotAllowed"


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
        # streamed through LiteLLM: whatever ids survive its stream wrapper are the backend's exact ids
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


def test_openai_sdk_error_is_clear(client):
    _, creds = client.begin_episode()
    bad = creds.model_copy(update={"api_key": "ajet-ep-wrong"})
    with pytest.raises(openai.AuthenticationError):
        bad.as_openai_client(max_retries=0).chat.completions.create(model="m", messages=MSGS)

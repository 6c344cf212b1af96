"""The server's per-turn cap (the job's `max_response_length_in_one_turn`, 96 tokens here) never stops an agent:
a turn it cuts, where the client asked for no smaller limit, is answered in each API as a finished turn (chat
`stop`, Responses `completed`, Messages `end_turn`), plain and streamed, and stored as `truncated` with its true
finish reason (`length`). A limit the client set keeps the faithful answer and is not `truncated`. The OpenAI Agents
SDK, which raises on an incomplete response, completes an episode whose answer hits the cap."""

import asyncio

import anthropic
import httpx
import orjson
import pytest

CAP = 96
RAMBLE = "and then " * 40  # 360 characters: the char-level policy needs 360 tokens, the cap cuts it at 96


@pytest.fixture()
def episode(swarm):
    uuid, creds = swarm.client.begin_episode()
    return uuid, creds


def only_call(swarm, uuid):
    swarm.client.get_episode(uuid)  # flushed
    (call,) = swarm.store.calls(uuid)
    return call


def sse_events(lines):
    return [orjson.loads(line[6:]) for line in lines if line.startswith("data: {")]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("asked", [None, 10_000], ids=["no-limit", "above-the-cap"])
def test_chat_a_turn_the_cap_cuts_is_a_finished_turn_and_stored_truncated(swarm, episode, stream, asked):
    uuid, creds = episode
    swarm.answer(RAMBLE)
    oc = creds.as_openai_client()
    kw = {} if asked is None else {"max_tokens": asked}
    if stream:
        chunks = list(oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "go"}],
                                                 stream=True, **kw))  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == ["stop"]
    else:
        r = oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "go"}], **kw)
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert finish == "stop" and r.usage.completion_tokens == CAP
    assert text == RAMBLE[:CAP]
    call = only_call(swarm, uuid)
    assert call.truncated and call.finish_reason == "length" and len(call.completion_ids) == CAP
    assert call.error is None and call.trainable


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_chat_a_limit_the_client_set_keeps_length_and_is_not_truncated(swarm, episode, stream):
    uuid, creds = episode
    swarm.answer(RAMBLE)
    url, headers = creds.base_url + "/chat/completions", {"Authorization": f"Bearer {creds.api_key}"}
    body = {"messages": [{"role": "user", "content": "go"}], "max_tokens": 10, "stream": stream}
    if stream:
        with httpx.stream("POST", url, json=body, headers=headers) as r:
            events = sse_events(r.iter_lines())
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"][0].get("finish_reason")]
    else:
        finish = [httpx.post(url, json=body, headers=headers).json()["choices"][0]["finish_reason"]]
    assert finish == ["length"]
    call = only_call(swarm, uuid)
    assert not call.truncated and call.finish_reason == "length" and len(call.completion_ids) == 10


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_the_cap_completes_and_a_client_limit_is_incomplete(swarm, stream):
    results = []
    for limit in (None, 10):
        uuid, creds = swarm.client.begin_episode()
        oc = creds.as_openai_client()
        swarm.answer(RAMBLE)
        kw = {} if limit is None else {"max_output_tokens": limit}
        if stream:
            events = list(oc.responses.create(model="policy", input="go", stream=True, **kw))
            r = events[-1].response
        else:
            r = oc.responses.create(model="policy", input="go", **kw)
        results.append((r.status, r.output_text, only_call(swarm, uuid).truncated))
    assert results == [("completed", RAMBLE[:CAP], True), ("incomplete", RAMBLE[:10], False)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_messages_the_cap_ends_the_turn_and_a_client_limit_is_max_tokens(swarm, stream):
    """Anthropic's API requires `max_tokens`; Claude Code streams with 32,000 (the SDK allows at most ~21k without a
    stream). Above the cap it is cut to the cap."""
    results = []
    for limit in (32_000 if stream else 16_000, 10):
        uuid, creds = swarm.client.begin_episode()
        ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key, max_retries=0)
        swarm.answer(RAMBLE)
        kw = {"model": "policy", "max_tokens": limit, "messages": [{"role": "user", "content": "go"}]}
        if stream:
            with ac.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = ac.messages.create(**kw)
        results.append((msg.stop_reason, msg.content[0].text, only_call(swarm, uuid).truncated))
    assert results == [("end_turn", RAMBLE[:CAP], True), ("max_tokens", RAMBLE[:10], False)]


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_the_agents_sdk_completes_an_episode_whose_answer_hits_the_cap(swarm, episode, responses, streamed):
    """Before: the Responses model's `incomplete` raised `ModelBehaviorError` in `Runner.run` and `run_streamed`."""
    import openai
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    uuid, creds = episode
    swarm.answer(RAMBLE)
    client = openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key)
    model = (OpenAIResponsesModel if responses else OpenAIChatCompletionsModel)(model="policy", openai_client=client)
    agent = Agent(name="talker", instructions="Talk.", model=model)

    async def run():
        if not streamed:
            return (await Runner.run(agent, "Talk.")).final_output
        result = Runner.run_streamed(agent, "Talk.")
        _ = [e async for e in result.stream_events()]
        return result.final_output

    assert asyncio.run(run()) == RAMBLE[:CAP]
    call = only_call(swarm, uuid)
    assert call.truncated and call.finish_reason == "length"
    swarm.assert_episode_trains(uuid)


@pytest.mark.parametrize("overlong", ["keep", "mask", "zero_reward"])
def test_what_the_trainer_makes_of_a_turn_the_cap_cut(swarm, overlong):
    """One episode: a short answer, then a rambling one the cap cuts; ended with reward 1.0 and assembled from the
    store under each `overlong` rule."""
    from ajet import Task, WorkflowOutput
    from ajet_trainer.samples import assemble

    uuid, creds = swarm.client.begin_episode()
    oc = creds.as_openai_client()
    swarm.answer("ok", RAMBLE)
    messages = [{"role": "user", "content": "hi"}]
    first = oc.chat.completions.create(model="policy", messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "go"}]
    oc.chat.completions.create(model="policy", messages=messages)
    swarm.client.end_episode(Task(task_id="cap"), uuid, WorkflowOutput(reward=1.0))
    pool = [p for p in swarm.store.pool_episodes() if p.uuid == uuid]
    (sample,), stats = assemble(swarm.store.rewarded_episodes(pool), 10_000, 10_000, overlong=overlong)
    (seq,) = sample.sequences  # token in, token out: one sequence
    trained = sum(seq.response_mask)
    assert stats.truncated_calls == 1
    want = {"keep": (1.0, 3 + CAP), "mask": (1.0, 3), "zero_reward": (0.0, 3 + CAP)}[overlong]  # "ok" + EOS + ...
    assert (sample.reward, trained) == want, (sample.reward, trained)


def test_a_prompt_over_max_prompt_length_is_refused_by_engine_and_proxy(tmp_path):
    """On the embedded engine the engine refuses a rendered prompt over the job's `max_prompt_length`; a token
    prompt (the episode's history) the proxy refuses before sending. Both are OpenAI's `context_length_exceeded`,
    so an agent that compacts its history on it can go on; both calls are logged as refused."""
    import openai

    from tests.support.scripted_swarm import scripted_swarm

    with scripted_swarm(tmp_path, max_prompt_length=200, max_response_length=2000, max_model_len=4000) as s:
        uuid, creds = s.client.begin_episode()
        oc = creds.as_openai_client()
        with pytest.raises(openai.BadRequestError) as err:
            oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "q" * 300}])
        assert err.value.code == "context_length_exceeded" and "max_prompt_length" in str(err.value.message)
        s.answer("ok")
        messages = [{"role": "user", "content": "hi"}]
        first = oc.chat.completions.create(model="policy", messages=messages)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "r" * 300}]  # fmt: skip
        with pytest.raises(openai.BadRequestError) as err:
            oc.chat.completions.create(model="policy", messages=messages)
        assert err.value.code == "context_length_exceeded"
        s.client.get_episode(uuid)
        calls = s.store.calls(uuid)
        assert [c.error is None for c in calls] == [False, True, False]
        assert calls[2].token_history == "extended" and len(calls[2].prompt_ids) > 200  # refused by the proxy
        assert "max_prompt_length" in calls[0].error and "max_prompt_length" in calls[2].error

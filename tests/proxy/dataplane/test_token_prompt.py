"""Token in, token out through a real proxy, on the built-in BPE models (Qwen2.5-style `tiny-bpe` and the
`tiny-bpe-think`, Qwen3's template as shipped), with every framework's tool loop of
3 or more turns: the openai SDK (chat, plain and streamed; Responses with `previous_response_id`), the OpenAI
Agents SDK, LangGraph's ReAct agent and the anthropic SDK.

The scripted answers carry what breaks re-rendered history on a real model: ids that are not the tokenizer's own
split, a tool call written as compact JSON with `1.50`, an answer that starts with a blank line, a `<think>`
block followed by a new question, non-ASCII text. Each episode must train as exactly one sequence: its calls
labelled `first` then `extended`, each prompt the previous prompt + completion + the new messages' tokens, every
completion token trained and every inserted token masked. With `token_history="rendered"` the same loop breaks
apart (the contrast that shows the test can fail); an agent that rewrites its history falls back, counted; a
restarted proxy rebuilds the turn from the store.
"""

import asyncio
import json

import httpx
import openai
import pytest

from ajet import Task, WorkflowOutput
from ajet_trainer.samples import assemble, episode_sequences
from tests.support.procs import start_proxy
from tests.support.scripted_swarm import scripted_swarm
from tests.support.trajectory import ADD_TOOL, add, logprob_gaps, one_trajectory

pytestmark = pytest.mark.timeout(300)

CALL_1 = ["<tool_call>", '\n{"na', 'me":"add","arguments":{"a":2,"b":3}}\n', "</tool_call>"]
"""Compact JSON the template re-renders, in pieces that are not the BPE tokenizer's split."""
CALL_2 = '\n\nOnce more.\n<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 1.50}}\n</tool_call>'
"""A leading blank line, text before the call, and 1.50 (re-rendered as 1.5)."""
FINAL = "<think>\nnaïve sum: 6.5\n</think>\n\nThe sum is 6.5."
"""Reasoning the Qwen3-style template drops once a new question comes."""
BYE = "Bye!"
MODELS = ["builtin:tiny-bpe", "builtin:tiny-bpe-think"]


@pytest.fixture(scope="module", params=MODELS, ids=["qwen25-style", "qwen3-style"])
def swarm(request, tmp_path_factory):
    with scripted_swarm(tmp_path_factory.mktemp("bpe"), max_tokens_cap=128, model_name=request.param) as s:
        yield s


@pytest.fixture()
def episode(swarm):
    return swarm.client.begin_episode()


def assert_one_trajectory(swarm, uuid: str, n_calls: int) -> None:
    """The episode's calls form one exact trajectory, it trains as one sequence, and the step's metrics say so."""
    calls = swarm.store.calls(uuid)
    assert len(calls) == n_calls
    one_trajectory(calls, uuid)
    swarm.assert_episode_trains(uuid, min_calls=n_calls)
    pool = [p for p in swarm.store.pool_episodes() if p.uuid == uuid]
    _, stats = assemble(swarm.store.rewarded_episodes(pool), 10_000, 10_000)
    m = stats.metrics()
    assert m["history/merge_rate"] == 1.0 and m["history/fallbacks"] == 0 and m["history/sequences_per_episode"] == 1


def _tool_results(message) -> list[dict]:
    return [
        {"role": "tool", "tool_call_id": tc.id, "content": add(**json.loads(tc.function.arguments))}
        for tc in message.tool_calls or []
    ]


def _chat_loop(oc: openai.OpenAI, messages: list[dict]) -> list[dict]:
    """Call until the answer has no tool call, as an agent does; returns the conversation."""
    while True:
        message = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL]).choices[0].message
        messages = [*messages, message.model_dump(exclude_none=True), *_tool_results(message)]
        if not message.tool_calls:
            return messages


def test_openai_chat_tool_loop_then_a_new_question(swarm, episode):
    uuid, creds = episode
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    swarm.answer(CALL_1, CALL_2, FINAL, BYE)
    messages = _chat_loop(oc, [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "2+3+1.5?"}])
    assert messages[-1]["content"] == FINAL
    messages.append({"role": "user", "content": "Thanks, café?"})  # Qwen3-style: FINAL's <think> is dropped now
    assert _chat_loop(oc, messages)[-1]["content"] == BYE
    assert_one_trajectory(swarm, uuid, 4)


def test_openai_chat_streamed_tool_loop(swarm, episode):
    uuid, creds = episode
    swarm.answer(CALL_1, CALL_2, FINAL)

    async def run() -> list[dict]:
        async with openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key) as oc:
            messages: list[dict] = [{"role": "user", "content": "2+3+1.5?"}]
            while True:
                stream = await oc.chat.completions.create(
                    model="policy", messages=messages, tools=[ADD_TOOL], stream=True
                )
                text, calls = "", {}
                async for chunk in stream:
                    delta = chunk.choices[0].delta if chunk.choices else None
                    text += (delta.content or "") if delta else ""
                    for tc in (delta.tool_calls or []) if delta else []:
                        calls.setdefault(tc.index, tc)
                message = {"role": "assistant", "content": text or None}
                if calls:
                    message["tool_calls"] = [
                        {"id": c.id, "type": "function", "function": c.function.model_dump()} for c in calls.values()
                    ]
                results = [
                    {"role": "tool", "tool_call_id": c.id, "content": add(**json.loads(c.function.arguments))}
                    for c in calls.values()
                ]
                messages = [*messages, message, *results]
                if not calls:
                    return messages

    assert asyncio.run(run())[-1]["content"] == FINAL
    assert_one_trajectory(swarm, uuid, 3)


def test_openai_responses_with_previous_response_id(swarm, episode):
    uuid, creds = episode
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    tool = {"type": "function", "name": "add", "parameters": ADD_TOOL["function"]["parameters"]}
    swarm.answer(CALL_1, CALL_2, FINAL)
    response = oc.responses.create(model="policy", input="2+3+1.5?", tools=[tool])
    for _ in range(2):
        outputs = [
            {"type": "function_call_output", "call_id": item.call_id, "output": add(**json.loads(item.arguments))}
            for item in response.output
            if item.type == "function_call"
        ]
        response = oc.responses.create(model="policy", input=outputs, tools=[tool], previous_response_id=response.id)
    assert response.output_text == FINAL
    assert_one_trajectory(swarm, uuid, 3)


@pytest.mark.parametrize("responses", [True, False], ids=["responses-model", "chat-model"])
def test_openai_agents_sdk_default_model(swarm, episode, responses):
    """The Agents SDK's Responses model (its default) and its chat model, each keeping its own history."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    uuid, creds = episode
    swarm.answer(CALL_1, CALL_2, FINAL)

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key) as client:
            kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
            model = kind(model="policy", openai_client=client)
            agent = Agent(name="calc", instructions="Use the add tool.", tools=[function_tool(add)], model=model)
            return (await Runner.run(agent, "What is 2+3+1.5?")).final_output

    assert asyncio.run(run()) == FINAL
    assert_one_trajectory(swarm, uuid, 3)


def test_langgraph_react_agent(swarm, episode):
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    uuid, creds = episode
    swarm.answer(CALL_1, CALL_2, FINAL)
    llm = ChatOpenAI(
        model="policy", base_url=creds.base_url, api_key=creds.api_key, http_async_client=httpx.AsyncClient()
    )
    out = asyncio.run(create_react_agent(llm, [add]).ainvoke({"messages": [("user", "What is 2+3+1.5?")]}))
    assert out["messages"][-1].content == FINAL
    assert_one_trajectory(swarm, uuid, 3)


def test_anthropic_sdk_tool_loop(swarm, episode):
    import anthropic

    uuid, creds = episode
    ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key)
    tools = [{"name": "add", "description": "Add two numbers.", "input_schema": ADD_TOOL["function"]["parameters"]}]
    swarm.answer(CALL_1, CALL_2, FINAL)
    messages: list[dict] = [{"role": "user", "content": "2+3+1.5?"}]
    while True:
        reply = ac.messages.create(model="policy", max_tokens=128, tools=tools, messages=messages)
        uses = [b for b in reply.content if b.type == "tool_use"]
        messages.append({"role": "assistant", "content": reply.content})
        if not uses:
            break
        results = [{"type": "tool_result", "tool_use_id": u.id, "content": add(**u.input)} for u in uses]
        messages.append({"role": "user", "content": results})
    assert reply.content[-1].text == FINAL
    assert_one_trajectory(swarm, uuid, 3)


@pytest.mark.parametrize("name", ["pydantic-ai-chat", "pydantic-ai-responses", "agentscope"])
def test_more_frameworks_own_history_is_one_trajectory(swarm, name):
    """pydantic-ai's `message_history` (chat and Responses models) and AgentScope's memory, as their default agents
    keep them: a tool call, its result, an answer, one exact sequence on both templates."""
    from tests.support.framework_agents import AGENTS, play

    uuid, calls = play(swarm, AGENTS[name])
    assert [c.token_history for c in calls] == ["first", "extended"], [c.token_history for c in calls]
    assert_one_trajectory(swarm, uuid, 2)


def test_litellm_message_objects_sent_back_are_one_trajectory(swarm, episode):
    """LiteLLM as a client SDK, its `Message` objects appended to the history as they come back."""
    import litellm

    uuid, creds = episode
    swarm.answer(CALL_1, CALL_2, FINAL)
    messages: list = [{"role": "user", "content": "2+3+1.5?"}]
    for _ in range(3):
        answer = (
            litellm.completion(
                model="openai/policy",
                api_base=creds.base_url,
                api_key=creds.api_key,
                messages=messages,
                tools=[ADD_TOOL],
            )
            .choices[0]
            .message
        )
        messages.append(answer)
        for tc in answer.tool_calls or []:
            result = add(**json.loads(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
    assert messages[-1].content.endswith("The sum is 6.5.")  # LiteLLM moves the think block to reasoning_content
    assert_one_trajectory(swarm, uuid, 3)


def test_an_agent_that_rewrites_its_history_falls_back_and_still_trains(swarm, episode):
    uuid, creds = episode
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    swarm.answer(CALL_1, CALL_2, FINAL)
    messages = [{"role": "user", "content": "2+3+1.5?"}]
    first = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL]).choices[0].message
    messages = [*messages, first.model_dump(exclude_none=True), *_tool_results(first)]
    second = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL]).choices[0].message
    messages = [*messages, second.model_dump(exclude_none=True), *_tool_results(second)]
    messages[0] = {"role": "user", "content": "2+3+1.5, summarised?"}  # the agent edits its history
    oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL])
    calls = swarm.store.calls(uuid)
    assert [c.token_history for c in calls] == ["first", "extended", "fallback:history_edited"]
    seqs, merged, _starts = episode_sequences(calls, uuid, "t")
    assert len(seqs) == 2 and merged == 1  # the first two calls, then the rewritten one on its own
    trained = [t for s in seqs for t, m in zip(s.response_ids, s.response_mask) if m]
    assert trained == [t for c in calls for t in c.completion_ids]
    swarm.assert_episode_trains(uuid, min_calls=3)
    pool = [p for p in swarm.store.pool_episodes() if p.uuid == uuid]
    _, stats = assemble(swarm.store.rewarded_episodes(pool), 10_000, 10_000)
    assert stats.metrics()["history/fallback/history_edited"] == 1 and stats.metrics()["history/merge_rate"] == 0.5


def test_a_restarted_proxy_rebuilds_the_turn_from_the_store(tmp_path):
    with scripted_swarm(tmp_path, max_tokens_cap=128, model_name="builtin:tiny-bpe") as s:
        uuid, creds = s.client.begin_episode()
        oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
        s.answer(CALL_1, CALL_2, FINAL)
        messages = [{"role": "user", "content": "2+3+1.5?"}]
        first = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL]).choices[0].message
        messages = [*messages, first.model_dump(exclude_none=True), *_tool_results(first)]
        port = int(s.proxy.url.rsplit(":", 1)[1])
        s.proxy.close()
        s.proxy = start_proxy(tmp_path, s.store.url, port=port)
        try:
            assert _chat_loop(oc, messages)[-1]["content"] == FINAL  # its next calls: extended, not `first`
            assert_one_trajectory(s, uuid, 3)
        finally:
            s.proxy.close()


def test_the_litellm_transport_sends_the_token_prompt_too(tmp_path):
    """`ajet-proxy start --transport litellm`: the token prompt rides in LiteLLM's `extra_body`. (LiteLLM moves a
    `<think>` block out of the content into `reasoning_content`; the agent sends back what it got, and the token
    history keeps the block as generated.)"""
    with scripted_swarm(tmp_path, 128, "builtin:tiny-bpe", proxy_args=("--transport", "litellm")) as s:
        uuid, creds = s.client.begin_episode()
        s.answer(CALL_1, CALL_2, FINAL)
        oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
        assert _chat_loop(oc, [{"role": "user", "content": "2+3+1.5?"}])[-1]["content"].endswith("The sum is 6.5.")
        assert_one_trajectory(s, uuid, 3)


def test_rendered_history_breaks_the_same_loop_apart(tmp_path):
    """The contrast: with `token_history="rendered"` the same answers re-render differently, so the episode
    trains as several sequences (this is what exact history prevents, and what the tests above could miss)."""
    with scripted_swarm(tmp_path, max_tokens_cap=128, model_name="builtin:tiny-bpe", token_history="rendered") as s:
        uuid, creds = s.client.begin_episode()
        s.answer(CALL_1, CALL_2, FINAL)
        _chat_loop(openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key), [{"role": "user", "content": "?"}])
        calls = s.store.calls(uuid)
        assert [c.token_history for c in calls] == ["rendered"] * 3
        seqs, _, _ = episode_sequences(calls, uuid, "t")
        assert len(seqs) == 3
        s.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))


def test_exact_history_keeps_the_engine_trainer_logprob_gap(swarm, episode):
    """The model answering as itself (nothing scripted) for 3 turns with tools: the one merged sequence, scored by
    the trainer in one forward pass, gives the log-probs the engine logged turn by turn (~1e-7 apart, as a single
    call is)."""
    uuid, creds = episode
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    messages: list[dict] = [{"role": "system", "content": "Use the tool."}]
    for question in ("2+3?", "And naïve + 1?", "Thanks!"):
        messages.append({"role": "user", "content": question})
        reply = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL], max_tokens=12)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    calls = swarm.store.calls(uuid)
    gaps = logprob_gaps(swarm.model, one_trajectory(calls, uuid), swarm.pad_id)
    assert len(calls) == 3 and len(gaps) == sum(len(c.completion_ids) for c in calls) and max(gaps) < 1e-5, max(gaps)
    swarm.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=0.0))


def test_count_tokens_counts_with_the_bpe_tokenizer_and_template(swarm):
    """Claude Code's `/v1/messages/count_tokens` on a BPE model: the count is the logged prompt's length."""
    from tests.proxy.dataplane.messages.test_messages_api import assert_count_tokens_is_the_calls_prompt

    assert_count_tokens_is_the_calls_prompt(swarm)


def test_a_turn_the_cap_cuts_on_a_bpe_model_is_finished_for_the_agent_and_masked_for_the_trainer(swarm):
    """The server's per-turn cap (128 tokens here) on a BPE model: the agent gets a finished turn, the store the
    truth (`length`, `truncated`, exactly 128 ids), and the `mask` rule takes the turn out of the loss."""
    uuid, creds = swarm.client.begin_episode()
    swarm.answer("and then " * 200)
    ask = [{"role": "user", "content": "go"}]
    said = creds.as_openai_client().chat.completions.create(model="policy", messages=ask)
    assert said.choices[0].finish_reason == "stop" and said.usage.completion_tokens == 128
    swarm.client.end_episode(Task(task_id="cap"), uuid, WorkflowOutput(reward=1.0))
    (call,) = swarm.store.calls(uuid)
    assert call.truncated and call.finish_reason == "length" and len(call.completion_ids) == 128
    pool = [p for p in swarm.store.pool_episodes() if p.uuid == uuid]
    (masked,), stats = assemble(swarm.store.rewarded_episodes(pool), 10_000, 10_000, overlong="mask")
    assert masked.sequences == () and stats.truncated_calls == 1 and stats.overlong_masked_episodes == 1

"""Token in, token out through `ajet-swarm start` (proxy + trainer), its engine embedded or real vLLM (the CPU
build): the proxy renders each episode's new messages with the engine's `/tokenize` and sends the token history
as `kv_transfer_params.prompt_token_ids`, which vLLM 0.32's chat endpoint runs instead of re-rendering the
messages (plain and streamed; it still parses tool calls), and so does the embedded engine.

The model is the untrained `tiny-bpe` (and its Qwen3-style variant), so its answers are what breaks rendered
history on a real model: random byte-level tokens, cut by the length cap mid-character (U+FFFD in the text the
agent gets back), non-canonical splits. Each framework runs a 3-turn conversation with its tools defined:
the openai SDK (chat, plain and streamed; Responses with `previous_response_id`), the Agents SDK, LangGraph and
the anthropic SDK. Every episode is one exact trajectory, and the trainer's log-probs of that one merged
sequence match the engine's as for a single call. (Scripted tool calls with BPE quirks:
tests/proxy/dataplane/test_token_prompt.py.)
"""

from __future__ import annotations

import asyncio
from typing import Iterator

import httpx
import openai
import pytest

from ajet import Task, WorkflowOutput
from tests.support.bpe_swarm import BpeSwarm
from tests.support.real_vllm import vllm_python
from tests.support.trajectory import ADD_TOOL, add, logprob_gaps, one_trajectory

# a swarm per (engine, model); vLLM's CPU build starts in about a minute
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MAX_TOKENS = 12
QUESTIONS = ("What is 2+3?", "And naïve + 1?", "Thanks, café?")
ENGINES = [
    pytest.param(("embedded", "builtin:tiny-bpe"), id="embedded-qwen25"),
    pytest.param(("embedded", "builtin:tiny-bpe-think"), id="embedded-qwen3"),
    pytest.param(("vllm", "builtin:tiny-bpe"), id="vllm-qwen25", marks=pytest.mark.vllm_real),
    pytest.param(("vllm", "builtin:tiny-bpe-think"), id="vllm-qwen3", marks=pytest.mark.vllm_real),
]


@pytest.fixture(scope="module", params=ENGINES)
def sw(request, tmp_path_factory) -> Iterator[BpeSwarm]:
    engine, model = request.param
    if engine == "vllm":
        vllm_python()  # skips, or fails under AJET_REQUIRE_VLLM, without vLLM's CPU build
    s = BpeSwarm(tmp_path_factory.mktemp(f"{engine}-bpe"), engine, model)
    yield s
    s.close()


def assert_exact(sw: BpeSwarm, uuid: str, n_calls: int) -> None:
    """One exact trajectory, whose trainer log-probs equal the engine's as for one call."""
    calls = sw.store.calls(uuid)
    assert len(calls) == n_calls
    gaps = logprob_gaps(sw.model, one_trajectory(calls, uuid), sw.pad_id)
    assert max(gaps) < 1e-5, max(gaps)  # float32, as for one call: the trajectory changes nothing (9.5e-7 here)
    sw.client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))


def test_openai_chat_plain_and_streamed(sw):
    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    messages: list[dict] = [{"role": "system", "content": "Use the tool."}]
    for i, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        kw = dict(model="policy", messages=messages, tools=[ADD_TOOL], max_tokens=MAX_TOKENS)
        if i == 1:
            text = "".join(
                c.choices[0].delta.content or "" for c in oc.chat.completions.create(**kw, stream=True) if c.choices
            )
        else:
            text = oc.chat.completions.create(**kw).choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
    assert_exact(sw, uuid, 3)


def test_openai_responses_with_previous_response_id(sw):
    uuid, creds = sw.client.begin_episode()
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    tool = {"type": "function", "name": "add", "parameters": ADD_TOOL["function"]["parameters"]}
    previous = None
    for question in QUESTIONS:
        kw = {"previous_response_id": previous} if previous else {}
        previous = oc.responses.create(
            model="policy", input=question, tools=[tool], max_output_tokens=MAX_TOKENS, **kw
        ).id
    assert_exact(sw, uuid, 3)


def test_openai_agents_sdk(sw):
    """The chat-completions model: an untrained model stops only at the length cap, and the SDK's Responses model
    raises on an `incomplete` answer even when the cap is its own `max_tokens` (the default Responses model runs
    on the embedded engine in tests/proxy/dataplane/test_token_prompt.py)."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    uuid, creds = sw.client.begin_episode()

    async def run() -> None:
        async with openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key) as client:
            agent = Agent(
                name="calc",
                instructions="Use the add tool.",
                tools=[function_tool(add)],
                model=OpenAIChatCompletionsModel(model="policy", openai_client=client),
                model_settings=ModelSettings(max_tokens=MAX_TOKENS),
            )
            items: list = []
            for question in QUESTIONS:
                result = await Runner.run(agent, [*items, {"role": "user", "content": question}])
                items = result.to_input_list()

    asyncio.run(run())
    assert_exact(sw, uuid, 3)


def test_langgraph_react_agent(sw):
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    uuid, creds = sw.client.begin_episode()
    llm = ChatOpenAI(
        model="policy",
        base_url=creds.base_url,
        api_key=creds.api_key,
        max_tokens=MAX_TOKENS,
        http_async_client=httpx.AsyncClient(),
    )
    agent = create_react_agent(llm, [add])

    async def run() -> None:
        state: dict = {"messages": []}
        for question in QUESTIONS:
            state = await agent.ainvoke({"messages": [*state["messages"], ("user", question)]})

    asyncio.run(run())
    assert_exact(sw, uuid, 3)


def test_anthropic_sdk(sw):
    import anthropic

    uuid, creds = sw.client.begin_episode()
    ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key)
    tools = [{"name": "add", "description": "Add two numbers.", "input_schema": ADD_TOOL["function"]["parameters"]}]
    messages: list[dict] = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        reply = ac.messages.create(model="policy", max_tokens=MAX_TOKENS, tools=tools, messages=messages)
        messages.append({"role": "assistant", "content": reply.content or [{"type": "text", "text": ""}]})
    assert_exact(sw, uuid, 3)

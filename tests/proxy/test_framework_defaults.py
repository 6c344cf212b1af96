"""Every framework's default agent, as its users run it, against a real proxy and a scripted embedded engine (beside
`test_frameworks.py`): smolagents (`ToolCallingAgent`, whose default `tool_choice` is "required", and `CodeAgent`,
whose system prompt is ~8.7k tokens on the char-level model), pydantic-ai (chat and Responses models), DSPy
(`Predict`), LiteLLM as a client SDK (chat, Responses, and its `anthropic/` provider) and AgentScope (its ReAct
`Agent` with a toolkit). AutoGen, LlamaIndex and CrewAI pin an older openai or protobuf: they run in an environment
of their own (`test_framework_envs.py`).

The scripted policy says what each framework expects, so "runs" means the framework completed (a tool call, its
result, a final answer); each episode's calls are in the store with ids and logprobs, and the episode trains. The
job's limits are a real agent's: 16k-token prompts, a 32k context."""

import asyncio
import json

import pytest

from tests.support.scripted_swarm import scripted_swarm

FINAL = "The sum is 5."


def call(name: str, **arguments: object) -> list[str]:
    """A Hermes tool call as the policy writes it, in pieces: its tags spelled out (the grammar of a forced call
    spells them; an unforced one may too) and its JSON laid out as `json.dumps` lays it out."""
    return ["<", "tool_call>", json.dumps({"name": name, "arguments": arguments}), "</", "tool_call>"]


@pytest.fixture(scope="module")
def swarm(module_tmp):
    limits = {"max_prompt_length": 16_000, "max_response_length": 16_000, "max_model_len": 32_768}
    with scripted_swarm(module_tmp, max_tokens_cap=256, **limits) as s:
        yield s


@pytest.fixture()
def episode(swarm):
    return swarm.client.begin_episode()


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


# ---------------------------------------------------------------- smolagents


def _smol_model(creds):
    from smolagents import OpenAIServerModel

    return OpenAIServerModel(model_id="policy", api_base=creds.base_url, api_key=creds.api_key)


def test_smolagents_tool_calling_agent_with_its_default_tool_choice_required(swarm, episode):
    from smolagents import ToolCallingAgent, tool

    uuid, creds = episode
    swarm.answer(call("add", a=2, b=3), call("final_answer", answer="5"))
    agent = ToolCallingAgent(tools=[tool(add)], model=_smol_model(creds))
    assert str(agent.run("What is 2+3?")) == "5"
    calls = swarm.store.calls(uuid)
    assert [json.loads(c.request)["tool_choice"] for c in calls] == ["required", "required"]
    assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls"]
    swarm.assert_episode_trains(uuid, min_calls=2)


def test_smolagents_code_agent_with_its_default_system_prompt(swarm, episode):
    from smolagents import CodeAgent, tool

    uuid, creds = episode
    swarm.answer(
        "Thought: add them.\n<code>\nprint(add(2, 3))\n</code>", "Thought: done.\n<code>\nfinal_answer(5)\n</code>"
    )
    assert CodeAgent(tools=[tool(add)], model=_smol_model(creds)).run("What is 2+3?") == 5
    calls = swarm.store.calls(uuid)
    assert len(calls[0].prompt_ids) > 8_000  # the default system prompt, whole (the model's context was 4,096)
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- pydantic-ai


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai_agent_with_a_tool(swarm, episode, api):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    uuid, creds = episode
    swarm.answer(call("add", a=2, b=3), FINAL)
    model_class = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    model = model_class("policy", provider=OpenAIProvider(base_url=creds.base_url, api_key=creds.api_key))
    assert Agent(model, tools=[add]).run_sync("What is 2+3?").output == FINAL
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- DSPy


def test_dspy_predict(swarm, episode):
    import dspy

    uuid, creds = episode
    swarm.answer("[[ ## answer ## ]]\n5\n\n[[ ## completed ## ]]", "[[ ## answer ## ]]\n7\n\n[[ ## completed ## ]]")
    lm = dspy.LM("openai/policy", api_base=creds.base_url, api_key=creds.api_key, cache=False)
    with dspy.context(lm=lm):
        predict = dspy.Predict("question -> answer")
        assert [predict(question=q).answer for q in ("What is 2+3?", "And 3+4?")] == ["5", "7"]
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- LiteLLM as a client


def test_litellm_client_chat_responses_and_anthropic_provider(swarm, episode):
    import litellm

    uuid, creds = episode
    swarm.answer("hello", "hi there", "bonjour")
    key, messages = creds.api_key, [{"role": "user", "content": "hi"}]
    chat = litellm.completion(model="openai/policy", api_base=creds.base_url, api_key=key, messages=messages)
    responses = litellm.responses(model="openai/policy", api_base=creds.base_url, api_key=key, input="hi")
    anthropic = litellm.completion(  # LiteLLM appends /v1/messages itself
        model="anthropic/policy", api_base=creds.base_url.removesuffix("/v1"), api_key=key, messages=messages,
        max_tokens=50,
    )  # fmt: skip
    said = [chat.choices[0].message.content, responses.output[0].content[0].text, anthropic.choices[0].message.content]
    assert said == ["hello", "hi there", "bonjour"]
    swarm.assert_episode_trains(uuid, min_calls=3)


# ---------------------------------------------------------------- AgentScope


def test_agentscope_react_agent_with_a_toolkit(swarm, episode):
    from agentscope.agent import Agent
    from agentscope.credential import OpenAICredential
    from agentscope.message import TextBlock, UserMsg
    from agentscope.model import OpenAIChatModel
    from agentscope.tool import FunctionTool, Toolkit

    uuid, creds = episode
    swarm.answer(call("add", a=2, b=3), FINAL)

    async def run():  # its default model streams; a tool that only reads needs no permission prompt
        model = OpenAIChatModel(OpenAICredential(api_key=creds.api_key, base_url=creds.base_url), model="policy")
        toolkit = Toolkit(tools=[FunctionTool(add, is_read_only=True)])
        agent = Agent(name="calc", system_prompt="Use the add tool.", model=model, toolkit=toolkit)
        return await agent.reply(UserMsg(name="user", content=[TextBlock(text="What is 2+3?")]))

    reply = asyncio.run(run())
    assert [b.text for b in reply.content if b.type == "text"] == [FINAL]
    calls = swarm.store.calls(uuid)
    assert [(c.stream, c.finish_reason) for c in calls] == [(True, "tool_calls"), (True, "stop")]
    swarm.assert_episode_trains(uuid, min_calls=2)

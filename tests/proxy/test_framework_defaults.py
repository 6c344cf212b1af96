"""Every framework's default agent, as its users run it, against a real proxy and a scripted embedded engine (beside
`test_frameworks.py`): smolagents (`ToolCallingAgent`, whose default `tool_choice` is "required", and `CodeAgent`,
whose system prompt is ~8.7k tokens on the char-level model), pydantic-ai (chat and Responses models), DSPy
(`Predict`), LiteLLM as a client SDK (chat, Responses, and its `anthropic/` provider) and AgentScope (its ReAct
`Agent` with a toolkit); the agents themselves are `tests.support.framework_agents`. AutoGen, LlamaIndex and CrewAI
pin an older openai or protobuf: they run in an environment of their own (`test_framework_envs.py`).
`tests/e2e/test_framework_training.py` trains on them through `ajet-swarm start`.

The scripted policy says what each framework expects, so "runs" means the framework completed (a tool call, its
result, a final answer); each episode's calls are in the store with ids and logprobs, and the episode trains. The
job's limits are a real agent's: 16k-token prompts, a 32k context."""

import json

import pytest

from tests.support.framework_agents import AGENTS, play
from tests.support.scripted_swarm import scripted_swarm


@pytest.fixture(scope="module")
def swarm(module_tmp):
    limits = {"max_prompt_length": 16_000, "max_response_length": 16_000, "max_model_len": 32_768}
    with scripted_swarm(module_tmp, max_tokens_cap=256, **limits) as s:
        yield s


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_default_agent_completes_and_its_episode_trains(swarm, name):
    agent = AGENTS[name]
    uuid, calls = play(swarm, agent)
    assert len(calls) == len(agent.answers)
    if name == "smolagents-tool-calling":  # its default: every call forced, and constrained decoding honours it
        assert [json.loads(c.request)["tool_choice"] for c in calls] == ["required", "required"]
        assert [c.finish_reason for c in calls] == ["tool_calls", "tool_calls"]
    if name == "smolagents-code":
        assert len(calls[0].prompt_ids) > 8_000  # its default system prompt, whole (the model's context was 4,096)
    if name == "agentscope":
        assert [(c.stream, c.finish_reason) for c in calls] == [(True, "tool_calls"), (True, "stop")]
    swarm.assert_episode_trains(uuid, min_calls=len(agent.answers))

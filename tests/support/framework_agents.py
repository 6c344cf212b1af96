"""Each framework's default agent with one tool (`add`), as its users write it, and what a scripted policy says to
make it complete: shared by the proxy's framework tests (a scripted swarm) and the end-to-end training test
(`ajet-swarm start` with the trainer's engine scripted)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

Answer = Union[str, list[str]]
"""What the policy says to one request: a text, or pieces tokenized one by one (see `ScriptedSwarm.answer`)."""
FINAL = "The sum is 5."


def call(name: str, **arguments: object) -> list[str]:
    """A Hermes tool call as the policy writes it, in pieces: its tags spelled out (the grammar of a forced call
    spells them; an unforced one may too) and its JSON laid out as `json.dumps` lays it out."""
    return ["<", "tool_call>", json.dumps({"name": name, "arguments": arguments}), "</", "tool_call>"]


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


@dataclass(frozen=True)
class FrameworkAgent:
    """One framework's default agent."""

    answers: tuple[Answer, ...]
    """What the policy says, call by call, to make the agent complete."""
    run: Callable[[Any], object]
    """Runs the agent on an episode's credentials; returns its final output."""
    final: object
    """The final output it then returns."""


def play(swarm: Any, agent: FrameworkAgent) -> tuple[str, list[Any]]:
    """One episode of `agent` on a `ScriptedSwarm`: the policy scripted, the agent run to its final output (checked);
    the episode's uuid and its logged calls."""
    uuid, creds = swarm.client.begin_episode()
    swarm.answer(*agent.answers)
    assert agent.run(creds) == agent.final
    return uuid, swarm.store.calls(uuid)


def _smol_model(creds: Any) -> Any:
    from smolagents import OpenAIServerModel

    return OpenAIServerModel(model_id="policy", api_base=creds.base_url, api_key=creds.api_key)


def smol_tool_calling(creds: Any) -> object:
    """smolagents' `ToolCallingAgent` (its default `tool_choice` is "required")."""
    from smolagents import ToolCallingAgent, tool

    return str(ToolCallingAgent(tools=[tool(add)], model=_smol_model(creds)).run("What is 2+3?"))


def smol_code(creds: Any) -> object:
    """smolagents' `CodeAgent` (its default system prompt is ~8.7k characters)."""
    from smolagents import CodeAgent, tool

    return CodeAgent(tools=[tool(add)], model=_smol_model(creds)).run("What is 2+3?")


def pydantic_ai(creds: Any, responses: bool = False) -> object:
    """pydantic-ai's `Agent` on its chat (or Responses) model."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model_class = OpenAIResponsesModel if responses else OpenAIChatModel
    model = model_class("policy", provider=OpenAIProvider(base_url=creds.base_url, api_key=creds.api_key))
    return Agent(model, tools=[add]).run_sync("What is 2+3?").output


def dspy_predict(creds: Any) -> object:
    """DSPy's `Predict`, twice."""
    import dspy

    lm = dspy.LM("openai/policy", api_base=creds.base_url, api_key=creds.api_key, cache=False)
    with dspy.context(lm=lm):
        predict = dspy.Predict("question -> answer")
        return [predict(question=q).answer for q in ("What is 2+3?", "And 3+4?")]


def litellm_client(creds: Any) -> object:
    """LiteLLM as a client SDK: chat, Responses, and its `anthropic/` provider (which appends /v1/messages)."""
    import litellm

    key, messages = creds.api_key, [{"role": "user", "content": "hi"}]
    chat = litellm.completion(model="openai/policy", api_base=creds.base_url, api_key=key, messages=messages)
    responses = litellm.responses(model="openai/policy", api_base=creds.base_url, api_key=key, input="hi")
    anthropic = litellm.completion(
        model="anthropic/policy", api_base=creds.base_url.removesuffix("/v1"), api_key=key, messages=messages,
        max_tokens=50,
    )  # fmt: skip
    return [chat.choices[0].message.content, responses.output[0].content[0].text, anthropic.choices[0].message.content]


def agentscope(creds: Any) -> object:
    """AgentScope's `Agent` with a toolkit (its model streams; a read-only tool needs no permission prompt)."""
    from agentscope.agent import Agent
    from agentscope.credential import OpenAICredential
    from agentscope.message import TextBlock, UserMsg
    from agentscope.model import OpenAIChatModel
    from agentscope.tool import FunctionTool, Toolkit

    async def run() -> Any:
        model = OpenAIChatModel(OpenAICredential(api_key=creds.api_key, base_url=creds.base_url), model="policy")
        toolkit = Toolkit(tools=[FunctionTool(add, is_read_only=True)])
        agent = Agent(name="calc", system_prompt="Use the add tool.", model=model, toolkit=toolkit)
        return await agent.reply(UserMsg(name="user", content=[TextBlock(text="What is 2+3?")]))

    return [b.text for b in asyncio.run(run()).content if b.type == "text"]


AGENTS: dict[str, FrameworkAgent] = {
    "smolagents-tool-calling": FrameworkAgent(
        (call("add", a=2, b=3), call("final_answer", answer="5")), smol_tool_calling, "5"
    ),
    "smolagents-code": FrameworkAgent(
        ("Thought: add.\n<code>\nprint(add(2, 3))\n</code>", "Thought: done.\n<code>\nfinal_answer(5)\n</code>"),
        smol_code,
        5,
    ),
    "pydantic-ai-chat": FrameworkAgent((call("add", a=2, b=3), FINAL), pydantic_ai, FINAL),
    "pydantic-ai-responses": FrameworkAgent(
        (call("add", a=2, b=3), FINAL), lambda creds: pydantic_ai(creds, responses=True), FINAL
    ),
    "dspy": FrameworkAgent(
        ("[[ ## answer ## ]]\n5\n\n[[ ## completed ## ]]", "[[ ## answer ## ]]\n7\n\n[[ ## completed ## ]]"),
        dspy_predict,
        ["5", "7"],
    ),
    "agentscope": FrameworkAgent((call("add", a=2, b=3), FINAL), agentscope, [FINAL]),
    "litellm": FrameworkAgent(("hello", "hi there", "bonjour"), litellm_client, ["hello", "hi there", "bonjour"]),
}
"""The default agents every test runs, by name."""

ENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv-frameworks" / "bin" / "python"
"""The environment of the frameworks whose pins conflict with the project's (`make setup-frameworks`)."""
QUIET = {"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true", "CREWAI_TRACING_ENABLED": "false"}
"""Nothing leaves the machine (CrewAI's telemetry and tracing are on by default)."""


def in_framework_env(framework: str) -> Callable[[Any], object]:
    """Runs `tests/frameworks/agents.py FRAMEWORK` in .venv-frameworks on the credentials; its final answer."""

    def run(creds: Any) -> object:
        script = Path(__file__).resolve().parents[1] / "frameworks" / "agents.py"
        done = subprocess.run(
            [str(ENV_PYTHON), str(script), framework, creds.base_url, creds.api_key],
            capture_output=True, text=True, timeout=240, env={**os.environ, **QUIET},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])["final"]

    return run


ENV_AGENTS: dict[str, FrameworkAgent] = {
    name: FrameworkAgent((call("add", a=2, b=3), FINAL), in_framework_env(name), FINAL)
    for name in ("autogen", "llamaindex", "crewai")
}
"""AutoGen's `AssistantAgent`, LlamaIndex's `FunctionAgent`, a CrewAI `Crew`, each with the tool (.venv-frameworks)."""

"""Each framework's default agent with one tool, run in .venv-frameworks (the frameworks whose pins conflict with
the project's environment). `python agents.py NAME BASE_URL API_KEY` runs agent NAME against an episode's
credentials and prints its final answer as one JSON line; tests/proxy/test_framework_envs.py starts the swarm,
scripts the policy and checks the store. Nothing here imports the project."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Callable


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def autogen(base_url: str, key: str) -> str:
    """AutoGen's `AssistantAgent` with a tool; a model it does not know needs its `model_info`."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    info = {"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
            "structured_output": False}  # fmt: skip
    client = OpenAIChatCompletionClient(model="policy", base_url=base_url, api_key=key, model_info=info)
    agent = AssistantAgent("calculator", model_client=client, tools=[add], reflect_on_tool_use=True)

    async def run() -> str:
        result = await agent.run(task="What is 2+3?")
        await client.close()
        return str(result.messages[-1].content)

    return asyncio.run(run())


def llamaindex(base_url: str, key: str) -> str:
    """LlamaIndex's `FunctionAgent` on `OpenAILike`."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model="policy", api_base=base_url, api_key=key, is_chat_model=True,
                     is_function_calling_model=True, context_window=32_768)  # fmt: skip
    agent = FunctionAgent(tools=[add], llm=llm, system_prompt="Use the add tool.")

    async def run() -> str:
        return str(await agent.run("What is 2+3?"))

    return asyncio.run(run())


def crewai(base_url: str, key: str) -> str:
    """CrewAI: a `Crew` of one agent with a tool and one task."""
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    adder = tool("add")(add)
    llm = LLM(model="openai/policy", base_url=base_url, api_key=key)
    agent = Agent(role="Calculator", goal="Add numbers", backstory="You add numbers.", tools=[adder], llm=llm)
    task = Task(description="What is 2+3?", expected_output="The sum", agent=agent)
    return str(Crew(agents=[agent], tasks=[task]).kickoff())


AGENTS: dict[str, Callable[[str, str], str]] = {"autogen": autogen, "llamaindex": llamaindex, "crewai": crewai}

if __name__ == "__main__":
    name, url, api_key = sys.argv[1:4]
    print(json.dumps({"final": AGENTS[name](url, api_key)}))

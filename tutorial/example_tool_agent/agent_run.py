"""The tool agent and its reward, written with the OpenAI SDK's tool loop (as most agents outside a framework are).

The model must answer a question such as "What is 47 * 86?". It has one tool, `calculator(operation, a, b)`; the
first turn forces a tool call (`tool_choice="required"`: the operation and the numbers are the model's), later turns
may call it again or answer
(`"auto"`), at most `MAX_TURNS` turns. The tool's result comes back as a tool message and the loop goes on.
Reward: 1.0 when the final answer (the first turn with no tool call) holds the product as a number, else 0.0.

What the untrained SmolLM2-135M-Instruct does (tutorial readme): it often picks another operation than the question's
or another number, and after a right result it often answers something else than the number: what RL can fix.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

import openai

from ajet import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.async_client import AsyncAgentFn
from tutorial.example_tool_agent.calculator import TOOL_SPEC, calculate

SYSTEM = "You are a math assistant. Use the calculator tool for arithmetic, then state the final answer."
MAX_TURNS = 3
MAX_TOKENS = 48
"""Per turn: a call or an answer fits in ~30 tokens; a ramble is cut (and scores by what it holds)."""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def compute_reward(final: str, answer: str) -> float:
    """1.0 when `final` holds the number `answer` (commas in numbers dropped: "2,436" is 2436), else 0.0."""
    numbers = _NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", final))
    return 1.0 if answer in numbers else 0.0


def _request(messages: list[dict[str, Any]], turn: int, temperature: float, seed: Optional[int]) -> dict[str, Any]:
    return {
        "model": "policy",
        "messages": messages,
        "tools": [TOOL_SPEC],
        "tool_choice": "required" if turn == 0 else "auto",
        "max_tokens": MAX_TOKENS,
        "temperature": temperature,
        "seed": None if seed is None else seed + turn,
    }


def _tool_messages(message: Any) -> list[dict[str, Any]]:
    """The tool's answer to each call of an assistant message."""
    out = []
    for call in message.tool_calls:
        try:
            args = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError:
            args = None
        out.append({"role": "tool", "tool_call_id": call.id, "content": calculate(args)})
    return out


def _scored(task: Task, final: str, calls: int) -> WorkflowOutput:
    reward = compute_reward(final, task.metadata["answer"])
    return WorkflowOutput(
        reward=reward, is_success=reward == 1.0, metadata={"final": final[-300:], "tool_calls": calls}
    )


def opening(task: Task) -> list[dict[str, Any]]:
    """An episode's first messages: the system prompt and the question."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.main_query}]


async def solve(client: openai.AsyncOpenAI, task: Task, temperature: float = 1.0) -> WorkflowOutput:
    """One episode's loop on `client` (its base URL and key the episode's), sampling with the task's
    `metadata["seed"]` when it has one."""
    messages, final, calls = opening(task), "", 0
    for turn in range(MAX_TURNS):
        req = _request(messages, turn, temperature, task.metadata.get("seed"))
        message = (await client.chat.completions.create(**req)).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            final = message.content or ""
            break
        calls += len(message.tool_calls)
        messages.extend(_tool_messages(message))
    return _scored(task, final, calls)


def async_agent(base: openai.AsyncOpenAI, temperature: float = 1.0) -> AsyncAgentFn:
    """The agent for `run_episodes_async`: each episode a view of `base` (one connection pool) with its own key."""

    async def run(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        return await solve(base.with_options(base_url=creds.base_url, api_key=creds.api_key), task, temperature)

    return run

"""The vision agent and its reward, with the OpenAI SDK: it sends the screen as an image part and must name the
shape's colour. Its answer is constrained to `"red"` or `"blue"` (`response_format` with a JSON schema enum: the
engine masks every other token), so the one choice it makes is the colour. Reward: 1.0 when it names the drawn
colour, else 0.0.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Optional

import openai

from ajet import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.async_client import AsyncAgentFn
from tutorial.example_vision_agent.tasks import COLOURS, QUESTION, draw

MAX_TOKENS = 8
ANSWER_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "colour", "schema": {"type": "string", "enum": sorted(COLOURS)}},
}
"""The answer is one of the colours, as a JSON string."""


def screen_message(task: Task, blank: bool = False) -> dict[str, Any]:
    """The user turn: the task's screen (a base64 PNG data: URL) and the question."""
    url = "data:image/png;base64," + base64.b64encode(draw(task.metadata["seed"], blank)).decode()
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}],
    }


def named_colour(content: Optional[str]) -> str:
    """The colour an answer names ("" when it names none)."""
    try:
        value = json.loads(content or "")
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


async def look(client: openai.AsyncOpenAI, task: Task, temperature: float = 1.0, blank: bool = False) -> WorkflowOutput:
    """One episode: look at the screen, name the colour."""
    seed = task.metadata.get("sample_seed")
    answer = await client.chat.completions.create(
        model="policy", messages=[screen_message(task, blank)], response_format=ANSWER_FORMAT,
        max_tokens=MAX_TOKENS, temperature=temperature, seed=seed,
    )  # fmt: skip
    said = named_colour(answer.choices[0].message.content)
    reward = 1.0 if said == task.metadata["answer"] else 0.0
    return WorkflowOutput(reward=reward, is_success=reward == 1.0, metadata={"said": said})


def async_agent(base: openai.AsyncOpenAI, temperature: float = 1.0, blank: bool = False) -> AsyncAgentFn:
    """The agent for `run_episodes_async`: each episode a view of `base` with its own key."""

    async def run(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        client = base.with_options(base_url=creds.base_url, api_key=creds.api_key)
        return await look(client, task, temperature, blank)

    return run

"""The agent and its reward: reply with the letter the prompt names (checked by a rule).

The demo's four tasks ("Say the letter: a" ... "d"; `letters.jsonl` holds eight, to "h"). The untrained
model answers with one of ~100 characters at random (reward ~0.01), a constant answer scores 1/4, and only a
policy that reads the prompt can reach 1.0.
"""

from __future__ import annotations

from typing import Any, Optional

import openai

from ajet import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.async_client import AsyncAgentFn

# One HTTP connection pool for every episode; each episode gets a view with its own key and URL.
_BASE_CLIENT = openai.OpenAI(base_url="http://127.0.0.1", api_key="unused", max_retries=2)


def compute_reward(task: Task, answer: str) -> float:
    """1.0 when the answer starts with the named letter, else 0.0."""
    return 1.0 if answer[:1] == task.metadata["letter"] else 0.0


def _request(task: Task, seed: Optional[int]) -> dict[str, Any]:
    """The episode's one chat call: one token, temperature 1, sampled with `seed` when given."""
    messages = [{"role": "user", "content": task.main_query}]
    return {"model": "policy", "max_tokens": 1, "temperature": 1.0, "seed": seed, "messages": messages}


def _scored(task: Task, answer: str) -> WorkflowOutput:
    reward = compute_reward(task, answer)
    return WorkflowOutput(reward=reward, is_success=reward == 1.0, metadata={"answer": answer})


def run_agent_and_compute_reward(task: Task, base_url: str, api_key: str, seed: Optional[int] = None) -> WorkflowOutput:
    """One episode: ask the policy once (sampling with `seed` when given), score its answer."""
    client = _BASE_CLIENT.with_options(base_url=base_url, api_key=api_key)
    resp = client.chat.completions.create(**_request(task, seed))
    return _scored(task, resp.choices[0].message.content or "")


def async_agent(base: openai.AsyncOpenAI) -> AsyncAgentFn:
    """The same agent in an event loop, for `run_episodes_async`: each episode a view of `base` (one connection
    pool, e.g. `openai.AsyncOpenAI(http_client=openai.DefaultAioHttpClient())`) with its own key and URL, sampling
    with the task's `metadata["seed"]` when it has one."""

    async def run(task: Task, creds: OpenaiBaseUrlAndApiKey) -> WorkflowOutput:
        client = base.with_options(base_url=creds.base_url, api_key=creds.api_key)
        resp = await client.chat.completions.create(**_request(task, task.metadata.get("seed")))
        return _scored(task, resp.choices[0].message.content or "")

    return run

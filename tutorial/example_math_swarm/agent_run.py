"""A gsm8k-style math agent written with the OpenAI SDK, and its reward.

The agent may call `run_python` (a sandboxed subprocess, see python_tool.py) and gets its output back
as a tool message; it answers with `\\boxed{N}`. Reward: 1.0 when the boxed answer equals the number after
`####` in the reference, compared as numbers; else 0.0.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import openai

from ajet import Task, WorkflowOutput
from tutorial.example_math_swarm.python_tool import TOOL_SPEC, run_python

MAX_TURNS = 4
SYSTEM = "Solve the math problem. You may call run_python to compute. End with the final number in \\boxed{}."
_BASE_CLIENT = openai.OpenAI(base_url="http://127.0.0.1", api_key="unused", max_retries=2)
_NUM = re.compile(r"-?\d[\d,]*\.?\d*")


def to_number(text: str) -> Optional[float]:
    """The first number in `text` ("1,013", "$29", "63.0"), or None."""
    m = _NUM.search(text.replace("$", ""))
    if m is None:
        return None
    try:
        return float(m.group(0).replace(",", ""))
    except ValueError:
        return None


def boxed(text: str) -> Optional[str]:
    """The content of the last `\\boxed{...}`, or None."""
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1] if found else None


def compute_reward(answer_text: str, reference: str) -> float:
    """1.0 when the boxed answer equals the reference's `#### N`, as numbers."""
    got = boxed(answer_text)
    want = to_number(reference.split("####")[-1])
    value = to_number(got) if got is not None else None
    return 1.0 if value is not None and want is not None and abs(value - want) < 1e-6 else 0.0


def run_agent_and_compute_reward(task: Task, base_url: str, api_key: str, max_tokens: int = 256) -> WorkflowOutput:
    """Multi-turn: the model may call run_python; tool output is fed back; the last answer is scored."""
    client = _BASE_CLIENT.with_options(base_url=base_url, api_key=api_key)
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.main_query}]
    final, tool_calls_made = "", 0
    for _turn in range(MAX_TURNS):
        msg = (
            client.chat.completions.create(
                model="policy", messages=messages, tools=[TOOL_SPEC], max_tokens=max_tokens, temperature=1.0
            )
            .choices[0]
            .message
        )
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            final = msg.content or ""
            break
        for call in msg.tool_calls:
            tool_calls_made += 1
            try:
                code = json.loads(call.function.arguments or "{}").get("code", "")
            except json.JSONDecodeError:
                code = ""
            output = run_python(code) if code else "error: run_python needs a 'code' argument"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    reward = compute_reward(final, task.metadata.get("answer", ""))
    return WorkflowOutput(
        reward=reward, is_success=reward == 1.0, metadata={"final": final[-500:], "tool_calls": tool_calls_made}
    )

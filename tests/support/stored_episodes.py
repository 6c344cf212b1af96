"""A store of rewarded tool-agent episodes, written through the store's own API as the proxy writes them: each
episode asks a sum, calls a calculator tool, then answers. Half the answers are right; the client's reward (a bug
on purpose) is 1 for every episode that called the tool, right or not. What a re-scoring's tests start from."""

from __future__ import annotations

import json
import time

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_store import Store
from ajet_store.types import CallRecord

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


PROMPT, CALL, TOOL_RESULT = [1, 2, 3], [4, 5], [8, 9]
"""The token ids of each episode's question, its tool call, and the tool's result inserted before its answer: the
answer's call extends the first exactly, so an episode is one sequence (its answer's ids: `answer_ids`)."""


def answer_ids(said: int) -> list[int]:
    """The ids of the answer `said`: they differ between answers (and fit the built-in tiny model's vocabulary)."""
    return [6, 50 + said % 50]


def _chat(uuid: str, seq: int, messages: list[dict], answer: dict, prompt: list[int], out: list[int]) -> CallRecord:
    body = json.dumps({"model": "policy", "messages": messages, "tools": TOOLS})
    response = json.dumps({"choices": [{"message": answer, "finish_reason": "stop"}]})
    return CallRecord(uuid, seq, body, response, prompt, out, [-0.1] * len(out), "stop", 0, "e", 5.0, time.time())


def tool_episode_calls(uuid: str, a: int, b: int, said: int) -> list[CallRecord]:
    """The two calls of one episode: a call of `add(a, b)`, then the answer `said` after the tool's result."""
    ask = [{"role": "user", "content": f"What is {a} + {b}?"}]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}
    first = {"role": "assistant", "content": None, "tool_calls": [call]}
    then = [*ask, first, {"role": "tool", "tool_call_id": "c1", "content": str(a + b)}]
    answer = {"role": "assistant", "content": f"It is {said}."}
    return [
        _chat(uuid, 0, ask, first, PROMPT, CALL),
        _chat(uuid, 1, then, answer, [*PROMPT, *CALL, *TOOL_RESULT], answer_ids(said)),
    ]


def rolling(st: Store) -> None:
    """Make the store's experiment ROLLING (a job synced), as a trainer does before episodes begin."""
    st.sync_job(AgentJetJob(model="builtin:tiny", project_name="rescore", experiment_name="sums"))
    st.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])


def fill_sums(st: Store, n: int, mission: str = "sums") -> dict[str, bool]:
    """`n` ended episodes (task `sum-<i // 2>`, two a task: the even one answers right, the odd one wrong); uuid ->
    whether its answer was right."""
    rolling(st)
    right = {}
    for i in range(n):
        uuid, a, b = f"ep-{i:03d}", i // 2, i + 1 - i % 2  # a task's two episodes get the same question
        said = a + b if i % 2 == 0 else a + b + 1
        st.begin_episode(uuid, "k" + uuid, "client", "train", 600, mission=mission)
        st.write_calls(tool_episode_calls(uuid, a, b, said))
        task = {"task_id": f"sum-{i // 2}", "main_query": f"What is {a} + {b}?", "metadata": {"answer": a + b}}
        meta = {"task": task, "workflow": {"called": True}, "log_metrics": {}}
        st.end_episode(uuid, "client", task["task_id"], 1.0, None, meta)
        right[uuid] = said == a + b
    return right

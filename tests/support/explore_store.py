"""A store holding what the explorer shows, written through the store's own API as proxy and trainer write it:
two steps of two GRPO groups each, one episode of two calls (a tool result inserted between its answers: trained
and masked tokens), and one whose answer and user message are hostile (`<script>`, HTML, an ANSI escape)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_store import Store
from ajet_store.types import CallRecord

HOSTILE_ANSWER = "<script>window.__pwned = 1</script><b>bold?</b> \x1b[31mred\x1b[0m"
HOSTILE_USER = '<img src=x onerror="window.__pwned = 2">'


@dataclass
class Filled:
    """What `fill` wrote, for the tests to compare the pages with."""

    rewards: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, str] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    two_calls: str = ""
    hostile: str = ""


def _call(uuid: str, seq: int, prompt: list[int], answer: list[int], messages: list[dict], text: str) -> CallRecord:
    body = json.dumps({"model": "policy", "messages": messages})
    response = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
    lps = [-0.1 * (i + 1) for i in range(len(answer))]
    return CallRecord(uuid, seq, body, response, prompt, answer, lps, "stop", 0, "e", 5.0, time.time(),
                      token_history="first" if seq == 0 else "extended")  # fmt: skip


def _episode(st: Store, uuid: str, task: str, reward: float, calls: list[CallRecord]) -> None:
    st.begin_episode(uuid, "k" + uuid, "client-a", "train", 600, mission="letters")
    st.write_calls(calls)
    st.end_episode(uuid, "client-a", task, reward, None, {})


def fill(st: Store, model: str, experiment: str = "letters-run", prefix: str = "") -> Filled:
    """Two steps of episodes, each step two tasks of two episodes (`Filled` says which is which); the job is
    `explore/<experiment>`, each uuid starts with `prefix` (experiments of one swarm told apart)."""
    st.sync_job(AgentJetJob(model=model, project_name="explore", experiment_name=experiment))
    st.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    out = Filled()
    for step in (1, 2):
        uuids = []
        for t, task in enumerate(("task-a", "task-b")):
            for k in range(2):
                uuid = f"{prefix}s{step}-{task}-{k}"
                reward = float((k + t + step) % 2) + 0.25 * k
                user = [{"role": "user", "content": f"say {task}"}]
                calls = [_call(uuid, 0, [10, 11, 12], [20, 21], user, "ok")]
                if step == 1 and task == "task-a" and k == 0:  # two calls: answer, tool result inserted, answer
                    out.two_calls = uuid
                    calls.append(_call(uuid, 1, [10, 11, 12, 20, 21, 30, 31, 32], [22, 23, 24], user, "done"))
                if step == 2 and task == "task-b" and k == 1:
                    out.hostile = uuid
                    hostile = [{"role": "user", "content": HOSTILE_USER}]
                    calls = [_call(uuid, 0, [10, 11], [25, 26], hostile, HOSTILE_ANSWER)]
                _episode(st, uuid, task, reward, calls)
                out.rewards[uuid], out.tasks[uuid], out.steps[uuid] = reward, task, step
                uuids.append(uuid)
        mean = sum(out.rewards[u] for u in uuids) / len(uuids)
        metrics = {"entropy": 4.0 - step, "kl": 0.01 * step, "logprob_gap": 0.001 * step, "history/merge_rate": 0.5,
                   "step_s": 1.5 * step}  # fmt: skip
        st.record_step(step, step, uuids, mean, metrics)
    return out

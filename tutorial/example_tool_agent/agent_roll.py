"""Train SmolLM2-135M-Instruct to use a calculator, through a running swarm, and score it on held-out questions.

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &          # proxy + trainer, their defaults
    python -m tutorial.example_tool_agent.agent_roll --swarm-url http://127.0.0.1:10086

1. The held-out questions are scored first (eval episodes, greedy: they never train), recorded as the evaluation
   `held_out` of the policy version that served them (`ajet.evaluate_async`; `SwarmClient.get_evaluations`).
2. Training: each step `--tasks-per-step` training questions, `--group` episodes each (GRPO's group), until
   `--minutes` of training or `--max-steps`; each step's mean reward and the rate at which its episodes' calls
   merged into one exact token sequence (`history/merge_rate`) are printed.
3. The held-out questions are scored again on the trained policy.
Ends with one JSON line: the held-out score before and after, every step's reward, merge rate and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import openai

from ajet import AgentJetJob, AsyncSwarmClient, Task, evaluate_async, run_episodes_async, wait_for_step_async
from ajet.async_client import AsyncAgentFn
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_tool_agent.agent_run import MAX_TOKENS, MAX_TURNS, async_agent
from tutorial.example_tool_agent.tasks import split_tasks

MODEL = "builtin:smollm2-135m-instruct"


@dataclass
class RunReport:
    """What one run measured (the JSON line it ends with)."""

    held_out_before: float = 0.0
    """The held-out score of the untrained policy (mean reward of greedy eval episodes)."""
    held_out_after: float = 0.0
    """The same after training."""
    steps: list[dict[str, float]] = field(default_factory=list)
    """Per step: `step`, `reward` (its mean), `merge_rate`, `trained_tokens`, `seconds` (since training began)."""
    train_seconds: float = 0.0
    """Wall time from the first training episode to the last step."""


def make_job(args: argparse.Namespace) -> AgentJetJob:
    """LoRA on every linear layer; a turn's answer is short (`MAX_TOKENS`), an episode at most `MAX_TURNS` turns."""
    return AgentJetJob(
        project_name="tutorial",
        experiment_name=args.experiment,
        model=args.model,
        batch_size=args.tasks_per_step,
        num_repeat=args.group,
        lr=args.lr,
        lora_rank=args.lora_rank,
        lora_alpha=2 * args.lora_rank,
        max_prompt_length=1024,
        max_response_length=MAX_TOKENS * MAX_TURNS,
        max_response_length_in_one_turn=MAX_TOKENS,
        max_model_len=2048,
        token_history=args.token_history,
        save_freq=0,
        n_gpu=1,
        seed=args.seed,
        ensure_new_experiment=True,
        logging=["jsonl"],
    )


async def held_out_score(client: AsyncSwarmClient, base: openai.AsyncOpenAI, tasks: list[Task]) -> float:
    """Mean reward of one greedy eval episode per task (eval episodes never train), recorded in the store as the
    evaluation `held_out` of the policy version that served it (`ajet.evaluate_async`)."""
    report = await evaluate_async(client, tasks, async_agent(base, temperature=0.0), name="held_out", timeout=300)
    return report.mean_reward


def a_batch(tasks: list[Task], rng: random.Random, args: argparse.Namespace, batch: int) -> list[Task]:
    """`tasks_per_step` questions drawn from `rng`, each `group` times with a sampling seed of its own."""
    out = []
    for i, task in enumerate(rng.sample(tasks, args.tasks_per_step)):
        for k in range(args.group):
            seed = (args.seed * 1_000_003 + batch * 1_009 + i * args.group + k) % 2**28
            out.append(task.model_copy(update={"metadata": {**task.metadata, "seed": seed * 8}}))
    return out


async def train(
    client: AsyncSwarmClient,
    base: openai.AsyncOpenAI,
    args: argparse.Namespace,
    report: RunReport,
    agent: Optional[AsyncAgentFn] = None,
) -> None:
    """Steps until `--minutes` of training or `--max-steps`, one batch in flight at a time (synchronous GRPO);
    `agent`: another agent than the tutorial's (the same calls, another reward, say)."""
    train_tasks, _ = split_tasks(args.task_seed)
    rng, agent = random.Random(args.seed), agent or async_agent(base)
    last = (await client.get_engine_status()).global_step
    t0 = time.monotonic()
    for batch in range(args.max_steps):
        if time.monotonic() - t0 > args.minutes * 60:
            break
        episodes = a_batch(train_tasks, rng, args, batch)
        await run_episodes_async(client, episodes, agent, in_flight=len(episodes), timeout=300, max_retries=3)
        step = await wait_for_step_async(client, last)
        last = step.step
        row = {"step": step.step, "reward": step.reward_mean or 0.0, "seconds": round(time.monotonic() - t0, 1)}
        row["merge_rate"] = float(step.metrics.get("history/merge_rate", float("nan")))
        row["trained_tokens"] = float(step.metrics.get("trained_tokens", 0))
        report.steps.append(row)
        print(json.dumps(row), flush=True)
    report.train_seconds = round(time.monotonic() - t0, 1)


async def run(args: argparse.Namespace) -> RunReport:
    """Score, train, score again; the engine is stopped at the end unless `--keep-engine`."""
    _, held_out = split_tasks(args.task_seed)
    client = AsyncSwarmClient(args.swarm_url)
    base = openai.AsyncOpenAI(base_url=args.swarm_url, api_key="unused", http_client=openai.DefaultAioHttpClient())
    report = RunReport()
    try:
        await client.auto_sync_train_config_and_start_engine(make_job(args), force_restart=True)
        report.held_out_before = await held_out_score(client, base, held_out)
        print(json.dumps({"held_out_before": report.held_out_before}), flush=True)
        await train(client, base, args, report)
        report.held_out_after = await held_out_score(client, base, held_out)
        if not args.keep_engine:
            await client.stop_engine()
    finally:
        await client.aclose()
        await base.close()
    return report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_swarm_url_option(ap)
    ap.add_argument("--model", default=MODEL, help="builtin:smollm2-135m-instruct or a local Hugging Face folder")
    ap.add_argument("--experiment", default="example_tool_agent")
    ap.add_argument("--minutes", type=float, default=30.0, help="training time budget")
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group", type=int, default=4, help="episodes per question (GRPO's group)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--token-history", choices=["exact", "rendered"], default="exact")
    ap.add_argument("--seed", type=int, default=0, help="the job's seed and the sampling seeds")
    ap.add_argument("--task-seed", type=int, default=0, help="which questions are train and held-out")
    ap.add_argument("--keep-engine", action="store_true", help="do not stop the engine at the end")
    return ap


def main() -> None:
    report: Any = asyncio.run(run(parser().parse_args()))
    print(json.dumps(asdict(report)))


if __name__ == "__main__":
    main()

"""Train the built-in VL model to name a shape's colour from the pixels, through a running swarm, and score it on
held-out screens; `--blank` is the control arm, whose screens are one flat grey (the model cannot see the answer).

    ajet-swarm start --host 127.0.0.1 --swarm-port 10086 &          # proxy + trainer, their defaults
    python -m tutorial.example_vision_agent.agent_roll --swarm-url http://127.0.0.1:10086

1. The held-out screens are scored first (eval episodes, greedy: they never train).
2. Training: each step `--tasks-per-step` screens, `--group` episodes each (GRPO's group), until `--max-steps` or
   `--minutes`; each step's mean reward is printed.
3. The held-out screens are scored again on the trained policy.
Ends with one JSON line: the held-out score before and after, and every step's reward and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import openai

from ajet import AgentJetJob, AsyncSwarmClient, Task, run_episodes_async, wait_for_step_async
from ajet.utils.flags import add_swarm_url_option
from tutorial.example_vision_agent.agent_run import MAX_TOKENS, async_agent
from tutorial.example_vision_agent.tasks import held_out_tasks, train_tasks

MODEL = "builtin:tiny-vl"


@dataclass
class RunReport:
    """What one run measured (the JSON line it ends with)."""

    blank: bool = False
    """The control arm: every screen a flat grey."""
    seed: int = 0
    """The job's seed (and the sampling seeds')."""
    held_out_before: float = 0.0
    """Mean reward of one greedy episode per held-out screen, untrained."""
    held_out_after: float = 0.0
    """The same after training."""
    steps: list[dict[str, float]] = field(default_factory=list)
    """Per step: `step`, `reward` (its mean), `seconds` (since training began)."""
    train_seconds: float = 0.0
    """Wall time of training."""


def make_job(args: argparse.Namespace) -> AgentJetJob:
    """Every weight trained (the model is small); one short answer per episode."""
    return AgentJetJob(
        project_name="tutorial",
        experiment_name=args.experiment,
        model=args.model,
        batch_size=args.tasks_per_step,
        num_repeat=args.group,
        lr=args.lr,
        lora_rank=args.lora_rank,
        lora_alpha=max(1, 2 * args.lora_rank),
        max_prompt_length=256,
        max_response_length=MAX_TOKENS,
        max_response_length_in_one_turn=MAX_TOKENS,
        max_model_len=512,
        save_freq=0,
        n_gpu=1,
        seed=args.seed,
        ensure_new_experiment=True,
        logging=["jsonl"],
    )


async def held_out_score(client: AsyncSwarmClient, base: openai.AsyncOpenAI, tasks: list[Task], blank: bool) -> float:
    """Mean reward of one greedy eval episode per screen (eval episodes never train)."""
    rewards = await run_episodes_async(
        client, tasks, async_agent(base, 0.0, blank), episode_type="eval", timeout=300, max_retries=2
    )
    failed = [r for r in rewards if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} eval episode(s) failed: {failed[0]!r}")
    return sum(float(r) for r in rewards if not isinstance(r, BaseException)) / len(tasks)


def a_batch(args: argparse.Namespace, batch: int) -> list[Task]:
    """`tasks_per_step` new screens, each `group` times with a sampling seed of its own."""
    screens = train_tasks(args.tasks_per_step * (batch + 1), args.seed)[-args.tasks_per_step :]
    return [
        t.model_copy(update={"metadata": {**t.metadata, "sample_seed": (args.seed * 7919 + batch * 131 + i * 17 + k)}})
        for i, t in enumerate(screens)
        for k in range(args.group)
    ]


async def train(
    client: AsyncSwarmClient, base: openai.AsyncOpenAI, args: argparse.Namespace, report: RunReport
) -> None:
    """Steps until `--max-steps` or `--minutes`, one batch in flight at a time (synchronous GRPO)."""
    agent = async_agent(base, 1.0, args.blank)
    last = (await client.get_engine_status()).global_step
    t0 = time.monotonic()
    for batch in range(args.max_steps):
        if time.monotonic() - t0 > args.minutes * 60:
            break
        episodes = a_batch(args, batch)
        await run_episodes_async(client, episodes, agent, in_flight=len(episodes), timeout=300, max_retries=3)
        step = await wait_for_step_async(client, last)
        last = step.step
        row = {"step": step.step, "reward": step.reward_mean or 0.0, "seconds": round(time.monotonic() - t0, 1)}
        report.steps.append(row)
        if not args.quiet:
            print(json.dumps(row), flush=True)
    report.train_seconds = round(time.monotonic() - t0, 1)


async def run(args: argparse.Namespace) -> RunReport:
    """Score, train, score again; the engine is stopped at the end unless `--keep-engine`."""
    held_out = held_out_tasks(args.held_out)
    client = AsyncSwarmClient(args.swarm_url)
    base = openai.AsyncOpenAI(base_url=args.swarm_url, api_key="unused", http_client=openai.DefaultAioHttpClient())
    report = RunReport(blank=args.blank, seed=args.seed)
    try:
        await client.auto_sync_train_config_and_start_engine(make_job(args), force_restart=True)
        report.held_out_before = await held_out_score(client, base, held_out, args.blank)
        await train(client, base, args, report)
        report.held_out_after = await held_out_score(client, base, held_out, args.blank)
        if not args.keep_engine:
            await client.stop_engine()
    finally:
        await client.aclose()
        await base.close()
    return report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_swarm_url_option(ap)
    ap.add_argument("--model", default=MODEL, help="builtin:tiny-vl or a local Qwen2-VL folder")
    ap.add_argument("--experiment", default="example_vision_agent")
    ap.add_argument("--blank", action="store_true", help="the control arm: every screen a flat grey")
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--minutes", type=float, default=20.0, help="training time budget")
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--group", type=int, default=8, help="episodes per screen (GRPO's group)")
    ap.add_argument("--held-out", type=int, default=64, help="held-out screens")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lora-rank", type=int, default=0, help="0: train every weight; else a LoRA adapter's rank")
    ap.add_argument("--seed", type=int, default=0, help="the job's seed, the screens' and the sampling seeds")
    ap.add_argument("--keep-engine", action="store_true", help="do not stop the engine at the end")
    ap.add_argument("--quiet", action="store_true", help="no line per step")
    return ap


def main() -> None:
    report: Any = asyncio.run(run(parser().parse_args()))
    print(json.dumps(asdict(report)))


if __name__ == "__main__":
    main()

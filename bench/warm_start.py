"""A warm start from the store (issue 52): best-of-group SFT on a first run's stored episodes, then GRPO from the SFT'd
model, against GRPO from scratch: the time to the target.

SmolLM2-135M-Instruct and the calculator agent of tutorial/example_tool_agent, one seed:
1. `first`: a first run, `--first-steps` steps of the tutorial's training on a draw of questions of its own (the
   seed + 1); its episodes stay in the store.
2. `sft`: a job beside it replays them with `train="sft"` (`ReplaySource`): each group's best episode, its exact ids,
   made more likely; no agent runs. Its adapter is then exported, merged, into a model folder.
3. `scratch`: the tutorial's GRPO from the base, `--steps` steps.
4. `warm`: the same GRPO, the same draws and sampling seeds, from the SFT'd model folder.
Each GRPO arm is the default experiment of a swarm of its own, so both are served and trained alike.

The held-out questions (greedy eval episodes) are scored on the base, on the SFT'd adapter and after each GRPO arm.
Rows: one per arm, and one comparing the arms: the time to `--target` (a step's mean reward) of `warm` with the SFT
and its export counted (the first run not: its episodes were already in the store) over `scratch`'s, and the reward
at equal steps. Seconds of a GRPO arm run from its first episode (the sync and model load left out, as in
bench/real_model.py); CPU seconds are this process's and the swarm's under it.

Usage: python -m bench.warm_start [--seed 0] [--first-steps 6] [--steps 8] [--target 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import openai

from ajet import AgentJetJob, AsyncSwarmClient
from ajet.replay_types import ReplaySource
from ajet.types import ExperimentState
from ajet_core.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from ajet_trainer.checkpoint import latest_checkpoint
from ajet_trainer.experiment_dir import folder_of_experiment
from bench.real_model import clients, cpu_seconds, export, time_to
from bench.results import emit

apply_offline_env()

from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.agent_roll import RunReport  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "warm_start"
PROJECT = "tutorial"


def roll_of(
    args: argparse.Namespace, name: str, seed: int, steps: int, model: Optional[str] = None
) -> argparse.Namespace:
    """The tutorial's options for one experiment: its name, the draws and sampling seeds of `seed`, `steps` steps."""
    argv = ["--seed", str(seed), "--task-seed", str(args.seed), "--experiment", name, "--max-steps", str(steps),
            "--minutes", "1e9"]  # fmt: skip
    return agent_roll.parser().parse_args(argv + (["--model", model] if model else []))


async def held_out(client: AsyncSwarmClient, base: openai.AsyncOpenAI, args: argparse.Namespace) -> float:
    return await agent_roll.held_out_score(client, base, split_tasks(args.seed)[1])


async def grpo(url: str, roll: argparse.Namespace, args: argparse.Namespace, before: bool = False) -> dict[str, Any]:
    """The tutorial's GRPO as one experiment of the swarm at `url`: its steps, seconds, CPU and held-out score after
    (and before, when `before`)."""
    report = RunReport()
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(roll))
        scored = {"held_out_before": await held_out(client, base, args)} if before else {}
        cpu0 = cpu_seconds()
        await agent_roll.train(client, base, roll, report)
        cpu = cpu_seconds() - cpu0
        after = await held_out(client, base, args)
    return {**scored, "steps": report.steps, "seconds": report.train_seconds, "cpu_s": round(cpu, 1),
            "held_out_after": after, "time_to_target": time_to(report.steps, args.target)}  # fmt: skip


QUIET_S = 60.0
"""The SFT has trained every batch it will once its step has not moved for this long (a step of its few best
episodes takes seconds; a last batch short of `batch_size` episodes never trains)."""


async def until_quiet(client: AsyncSwarmClient) -> tuple[int, float]:
    """Poll the experiment's step until it has not moved for `QUIET_S`; its last step, and when it was taken."""
    step, moved = 0, time.monotonic()
    while time.monotonic() - moved < QUIET_S:
        now = (await client.get_engine_status()).global_step
        if now != step:
            step, moved = now, time.monotonic()
        await asyncio.sleep(1.0)
    return step, moved


async def sft(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Best-of-group SFT on the first run's episodes, as an experiment beside it; stopped once it trained them all,
    its held-out score taken before it stops."""
    source = f"{PROJECT}/first-{args.seed}"
    roll = roll_of(args, f"sft-{args.seed}", args.seed, 0)
    job: AgentJetJob = agent_roll.make_job(roll).model_copy(
        update={"num_repeat": 1, "replay": ReplaySource(experiment=source, train="sft")}
    )
    async with clients(url) as (client, base):
        t0, cpu0 = time.monotonic(), cpu_seconds()
        await client.auto_sync_train_config_and_start_engine(job)
        steps, last = await until_quiet(client)
        seconds, cpu = last - t0, cpu_seconds() - cpu0  # the CPU of the quiet wait is the idle trainer's: counted
        after = await held_out(client, base, args)
        await client.stop_engine()
        while (await client.get_engine_status()).state != ExperimentState.OFFLINE:  # stopped (saved just after)
            await asyncio.sleep(0.5)
    return {"sft_steps": steps, "seconds": round(seconds, 1), "cpu_s": round(cpu, 1), "held_out_after": after}


def export_sft(exp_dir: Path, out: Path, seed: int) -> float:
    """The (stopped) SFT experiment's last checkpoint merged into a model folder at `out` (`export`); the seconds
    from its OFFLINE to the folder, the wait for the trainer's final checkpoint included."""
    t0 = time.monotonic()
    folder = folder_of_experiment(exp_dir, f"{PROJECT}/sft-{seed}")
    while latest_checkpoint(folder) is None:  # OFFLINE is the proxy's word; the trainer saves the last step after
        if time.monotonic() - t0 > 300:
            raise TimeoutError(f"no checkpoint in {folder} 300 s after its experiment went OFFLINE")
        time.sleep(0.5)
    export(folder, out)
    return round(time.monotonic() - t0, 1)


def first_and_sft(root: Path, args: argparse.Namespace, swarm_args: tuple[str, ...]) -> tuple[dict[str, dict], Path]:
    """The first run and the SFT beside it on one swarm; their rows and the SFT'd model folder."""
    rows: dict[str, dict] = {}
    with launched_swarm(root / "a", *swarm_args, timeout=900) as url:
        first = roll_of(args, f"first-{args.seed}", args.seed + 1, args.first_steps)
        rows["first"] = asyncio.run(grpo(url, first, args, before=True))
        rows["sft"] = asyncio.run(sft(url, args))
    rows["sft"]["export_s"] = export_sft(root / "a" / "experiment", root / "sft-model", args.seed)
    return rows, root / "sft-model"


def grpo_alone(root: Path, roll: argparse.Namespace, args: argparse.Namespace, swarm_args: tuple[str, ...]) -> dict:
    """A GRPO arm as the default experiment of a swarm of its own: both arms are served and trained alike (an
    experiment beside others is served through peft's mixed-adapter batches, which are slower)."""
    with launched_swarm(root, *swarm_args, timeout=900) as url:
        return asyncio.run(grpo(url, roll, args))


def compare(rows: dict[str, dict], args: argparse.Namespace) -> dict[str, Any]:
    """Warm against scratch: the time to the target (warm's SFT and export counted), the rewards at equal steps."""
    scratch, warm, sft_row = rows["scratch"], rows["warm"], rows["sft"]
    warm_t = warm["time_to_target"]
    warm_total = warm_t + sft_row["seconds"] + sft_row["export_s"] if warm_t is not None else None
    ratio = round(warm_total / scratch["time_to_target"], 3) if warm_total and scratch["time_to_target"] else None
    equal = min(len(scratch["steps"]), len(warm["steps"]))
    return {"figure": "compare", "seed": args.seed, "target": args.target,
            "held_out_base": rows["first"]["held_out_before"], "held_out_sft": sft_row["held_out_after"],
            "held_out_after_scratch": scratch["held_out_after"],
            "held_out_after_warm": warm["held_out_after"], "time_to_target_scratch": scratch["time_to_target"],
            "time_to_target_warm_with_sft": round(warm_total, 1) if warm_total else None, "warm_over_scratch": ratio,
            "reward_by_step_scratch": [s["reward"] for s in scratch["steps"][:equal]],
            "reward_by_step_warm": [s["reward"] for s in warm["steps"][:equal]]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-steps", type=int, default=6, help="steps of the first run, whose store the SFT reads")
    ap.add_argument("--steps", type=int, default=8, help="GRPO steps of each arm")
    ap.add_argument("--target", type=float, default=0.5, help="a step's mean reward the time to the target waits for")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the trainer's torch threads")
    args = ap.parse_args()
    swarm_args = ("--threads", str(args.threads))
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        rows, folder = first_and_sft(Path(tmp), args, swarm_args)
        scratch = roll_of(args, f"scratch-{args.seed}", args.seed, args.steps)
        rows["scratch"] = grpo_alone(Path(tmp) / "scratch", scratch, args, swarm_args)
        warm = roll_of(args, f"warm-{args.seed}", args.seed, args.steps, model=str(folder))
        rows["warm"] = grpo_alone(Path(tmp) / "warm", warm, args, swarm_args)
    for arm, row in rows.items():
        emit(BENCH, {"figure": "arm", "arm": arm, "seed": args.seed, **row})
    emit(BENCH, compare(rows, args))


if __name__ == "__main__":
    main()

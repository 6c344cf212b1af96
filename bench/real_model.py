"""A real model learns a real agentic task: SmolLM2-135M-Instruct and the calculator agent of
tutorial/example_tool_agent, through `ajet-swarm start`, arm against arm in one run.

Arms (same task, model, LoRA rank, learning rate, group size and seeds):
- `exact`: the swarm with exact token history (the default);
- `rendered`: the swarm with `token_history="rendered"` (every call re-rendered from its messages' text).

Each (arm, seed) starts a fresh swarm (`ajet-swarm start`'s defaults but `--threads`: the trainer gets every core,
as it is the whole load of the machine during an update), scores the held-out questions (greedy eval episodes),
trains for `--minutes`, and scores them again; the trained model is exported (merged) and its held-out score taken
again on a fresh swarm serving the exported folder. One row per (arm, seed): the held-out score before and after, the
reward of every step against its step and its wall time, the time to `--target` (a step's mean reward), and the CPU
seconds of the whole swarm and the client per trained token. Then one row per arm (the seeds' means) and one row
comparing the arms: the reward at equal steps and at equal wall time, and the ratio of the times to the target.

Usage: python -m bench.real_model [--seeds 0 1 2] [--minutes 30] [--arms exact rendered]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import openai
import psutil

from ajet import AsyncSwarmClient, SwarmClient
from ajet.types import ExperimentState
from ajet.utils.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from bench.results import emit
from tests.support.rolling import wait_state

apply_offline_env()

from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "real_model"


def cpu_seconds() -> float:
    """CPU seconds of this process and every process under it (the swarm it started) so far."""
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def time_to(steps: list[dict[str, float]], target: float) -> Optional[float]:
    """Seconds of training until the first step whose mean reward reaches `target` (None: never)."""
    return next((s["seconds"] for s in steps if s["reward"] >= target), None)


def export(run_root: Path) -> Path:
    """The run's last checkpoint as a merged model folder (`ajet-trainer export-model --merge-lora`)."""
    out = run_root / "exported"
    trainer = Path(sys.executable).with_name("ajet-trainer")
    subprocess.run([str(trainer), "export-model", "--experiment-dir", str(run_root / "experiment"), "--out", str(out),
                    "--merge-lora"], check=True, capture_output=True)  # fmt: skip
    return out


async def exported_score(url: str, folder: Path, roll_args: argparse.Namespace) -> float:
    """The held-out score of the exported folder, served by a fresh swarm's engine (transformers) as a plain model."""
    job = agent_roll.make_job(roll_args).model_copy(update={"model": str(folder), "lora_rank": 0})
    client = AsyncSwarmClient(url)
    base = openai.AsyncOpenAI(base_url=url, api_key="unused", http_client=openai.DefaultAioHttpClient())
    try:
        await client.auto_sync_train_config_and_start_engine(job.model_copy(update={"experiment_name": "exported"}))
        score = await agent_roll.held_out_score(client, base, split_tasks(roll_args.task_seed)[1])
        await client.stop_engine()
    finally:
        await client.aclose()
        await base.close()
    return score


def run_arm(arm: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One fresh swarm, one tutorial run on it, then its export scored on another; the (arm, seed) row."""
    roll_args = agent_roll.parser().parse_args(
        ["--minutes", str(args.minutes), "--seed", str(seed), "--task-seed", str(seed), "--token-history", arm,
         "--experiment", f"real-{arm}-{seed}"]
    )  # fmt: skip
    run_root = root / f"{arm}-{seed}"
    with launched_swarm(run_root, "--threads", str(args.threads), timeout=900) as url:
        roll_args.swarm_url = url
        cpu0 = cpu_seconds()
        report = asyncio.run(agent_roll.run(roll_args))
        cpu = cpu_seconds() - cpu0
        with SwarmClient(url) as client:  # the final checkpoint is written once the experiment is OFFLINE
            wait_state(client, ExperimentState.OFFLINE, timeout=300)
    with launched_swarm(root / f"{arm}-{seed}-exported", "--threads", str(args.threads), timeout=900) as url:
        exported = asyncio.run(exported_score(url, export(run_root), roll_args))
    tokens = sum(s.get("trained_tokens", 0.0) for s in report.steps)
    row = {"figure": "run", "arm": arm, "seed": seed, **asdict(report)}
    row.update(
        rise=round(report.held_out_after - report.held_out_before, 4), time_to_target=time_to(report.steps, args.target)
    )
    row.update(
        held_out_exported=exported,
        cpu_s=round(cpu, 1),
        cpu_s_per_trained_token=round(cpu / tokens, 5) if tokens else None,
    )
    return row


def at_step(rows: list[dict[str, Any]], step: int) -> float:
    """The seeds' mean reward at their `step`-th step (1-based)."""
    return statistics.fmean(r["steps"][step - 1]["reward"] for r in rows)


def at_seconds(rows: list[dict[str, Any]], seconds: float) -> float:
    """The seeds' mean reward of the last step each finished within `seconds` of training."""
    return statistics.fmean(max((s for s in r["steps"] if s["seconds"] <= seconds), key=lambda s: s["seconds"],
                                default={"reward": 0.0})["reward"] for r in rows)  # fmt: skip


def summarise(runs: dict[str, list[dict[str, Any]]], target: float) -> None:
    """One row per arm, then the arms compared at equal steps and equal wall time."""
    for arm, rows in runs.items():
        times = [r["time_to_target"] for r in rows]
        emit(BENCH, {
            "figure": "arm", "arm": arm, "seeds": [r["seed"] for r in rows],
            "held_out_before": statistics.fmean(r["held_out_before"] for r in rows),
            "held_out_after": statistics.fmean(r["held_out_after"] for r in rows),
            "rise_mean": statistics.fmean(r["rise"] for r in rows), "every_seed_rose": all(r["rise"] > 0 for r in rows),
            "time_to_target": times, "target": target,
            "cpu_s_per_trained_token": statistics.fmean(r["cpu_s_per_trained_token"] or 0.0 for r in rows),
        })  # fmt: skip
    if len(runs) < 2:
        return
    arms = list(runs)
    steps = min(len(r["steps"]) for rows in runs.values() for r in rows)
    seconds = min(r["steps"][-1]["seconds"] for rows in runs.values() for r in rows)
    row: dict[str, Any] = {"figure": "compare", "arms": arms, "equal_steps": steps, "equal_seconds": seconds}
    row["reward_at_equal_steps"] = {a: round(at_step(runs[a], steps), 4) for a in arms}
    row["reward_at_equal_seconds"] = {a: round(at_seconds(runs[a], seconds), 4) for a in arms}
    mean_t = {a: [r["time_to_target"] for r in runs[a]] for a in arms}
    if all(t is not None for ts in mean_t.values() for t in ts):
        first = statistics.fmean(mean_t[arms[0]])
        row["time_to_target_ratio"] = {a: round(statistics.fmean(mean_t[a]) / first, 3) for a in arms}
    emit(BENCH, row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=30.0, help="training time of each run")
    ap.add_argument("--arms", nargs="+", choices=["exact", "rendered"], default=["exact", "rendered"])
    ap.add_argument("--target", type=float, default=0.7, help="a step's mean reward the time-to-target waits for")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the trainer's torch threads")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in args.arms}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-model-") as tmp:
        for seed in args.seeds:  # arms interleaved per seed: a slow spell of the machine hits both
            for arm in args.arms:
                row = run_arm(arm, seed, args, Path(tmp))
                emit(BENCH, row)
                runs[arm].append(row)
    summarise(runs, args.target)
    print(f"# {time.monotonic() - t0:.0f} s in all", flush=True)


if __name__ == "__main__":
    main()

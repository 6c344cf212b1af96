"""A real model learns a real agentic task: SmolLM2-135M-Instruct and the calculator agent of
tutorial/example_tool_agent, arm against arm in one run.

Arms (same task, model, LoRA rank, learning rate, group size and seeds):
- `exact`: the swarm (`ajet-swarm start`) with exact token history (the default);
- `rendered`: the swarm with `token_history="rendered"` (every call re-rendered from its messages' text);
- `trl`: TRL's GRPOTrainer with the same tool, in-process (bench/real_model_trl.py says what is the same and what
  TRL cannot do: force the first turn's tool call).

Each swarm arm starts a fresh swarm (`ajet-swarm start`'s defaults but `--threads`: the trainer gets every core, as
it is the whole load of the machine during an update) and trains for `--minutes`; the TRL arm trains as long in a
process of its own. The held-out questions are scored (greedy eval episodes of the tutorial's agent, through a
swarm) before training (once per seed, by its first arm: every arm starts from the same model) and after: on the
swarm arm's own swarm, and for the TRL arm on a fresh swarm serving its merged model. `--export-arms` are also
exported (merged) and their held-out score taken again on a fresh swarm serving the export.

One row per (arm, seed): the held-out score before and after, the reward of every step against its step and its
wall time, the time to `--target` (a step's mean reward), and the CPU seconds (this process and every process under
it) per trained token during training. Then one row per arm (the seeds' means) and one row comparing the arms: the
reward at equal steps and at equal wall time, and the ratio of the times to the target.

Usage: python -m bench.real_model [--seeds 0 1 2] [--minutes 30] [--arms exact rendered trl] [--engine vllm]
       [--backend verl]
       python -m bench.real_model --summarise COMMIT [COMMIT ...]   # the arm and compare rows of stored run rows
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Optional

import openai
import psutil

from ajet import AsyncSwarmClient, SwarmClient
from ajet.types import ExperimentState
from ajet_core.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from ajet_trainer.tiny_model import builtin_model_path
from bench.results import emit
from tests.support.rolling import wait_state

apply_offline_env()

from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.agent_roll import RunReport  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "real_model"
ARMS = ["exact", "rendered", "trl"]


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


def export(exp_dir: Path, out: Path) -> Path:
    """The last checkpoint of the experiment folder `exp_dir` as a merged model folder at `out` (`ajet-trainer
    export-model --merge-lora`); returns `out`."""
    trainer = Path(sys.executable).with_name("ajet-trainer")
    subprocess.run([str(trainer), "export-model", "--experiment-dir", str(exp_dir), "--out", str(out), "--merge-lora"],
                   check=True, capture_output=True)  # fmt: skip
    return out


@asynccontextmanager
async def clients(url: str) -> AsyncIterator[tuple[AsyncSwarmClient, openai.AsyncOpenAI]]:
    """The swarm's client and the agent's OpenAI client (one connection pool), closed at the end."""
    client = AsyncSwarmClient(url)
    base = openai.AsyncOpenAI(base_url=url, api_key="unused", http_client=openai.DefaultAioHttpClient())
    try:
        yield client, base
    finally:
        await client.aclose()
        await base.close()


async def folder_score(url: str, folder: Path, roll_args: argparse.Namespace, name: str) -> float:
    """The held-out score of a model folder (no adapter), served by the swarm at `url` as a plain model."""
    job = agent_roll.make_job(roll_args).model_copy(update={"model": str(folder), "lora_rank": 0})
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(job.model_copy(update={"experiment_name": name}))
        score = await agent_roll.held_out_score(client, base, split_tasks(roll_args.task_seed)[1])
        await client.stop_engine()
    return score


async def swarm_run(roll_args: argparse.Namespace, before: Optional[float]) -> tuple[RunReport, float]:
    """The tutorial's run (score, train, score) on the swarm at `roll_args.swarm_url`, the CPU seconds of its
    training (swarm and client); the score before is taken only when `before` is None (it is the same base model)."""
    _, held_out = split_tasks(roll_args.task_seed)
    report = RunReport()
    async with clients(roll_args.swarm_url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(roll_args), force_restart=True)
        report.held_out_before = await agent_roll.held_out_score(client, base, held_out) if before is None else before
        cpu0 = cpu_seconds()
        await agent_roll.train(client, base, roll_args, report)
        cpu = cpu_seconds() - cpu0
        report.held_out_after = await agent_roll.held_out_score(client, base, held_out)
        await client.stop_engine()
    return report, cpu


def roll_args_of(arm: str, seed: int, args: argparse.Namespace) -> argparse.Namespace:
    """The tutorial's options for one (arm, seed): the same for every arm but the token history."""
    return agent_roll.parser().parse_args(
        ["--minutes", str(args.minutes), "--seed", str(seed), "--task-seed", str(seed),
         "--token-history", "rendered" if arm == "rendered" else "exact", "--experiment", f"real-{arm}-{seed}"]
    )  # fmt: skip


def run_swarm_arm(arm: str, seed: int, args: argparse.Namespace, root: Path, before: Optional[float]) -> dict:
    """One fresh swarm, one tutorial run on it, then (for `--export-arms`) its export scored on another."""
    roll_args, run_root = roll_args_of(arm, seed, args), root / f"{arm}-{seed}"
    swarm_args = ("--threads", str(args.threads), "--engine", args.engine, "--backend", args.backend)
    with launched_swarm(run_root, *swarm_args, timeout=900) as url:
        roll_args.swarm_url = url
        report, cpu = asyncio.run(swarm_run(roll_args, before))
        with SwarmClient(url) as client:  # the final checkpoint is written once the experiment is OFFLINE
            wait_state(client, ExperimentState.OFFLINE, timeout=300)
    row = {"figure": "run", "arm": arm, "seed": seed, "engine": args.engine, "backend": args.backend, **asdict(report),
           "held_out_before_measured": before is None}  # fmt: skip
    if arm in args.export_arms:
        exported = export(run_root / "experiment", run_root / "exported")
        with launched_swarm(root / f"{arm}-{seed}-exported", "--threads", str(args.threads), timeout=900) as url:
            row["held_out_exported"] = asyncio.run(folder_score(url, exported, roll_args, "exported"))
    return finish_row(row, report.steps, cpu, args)


def run_trl_arm(seed: int, args: argparse.Namespace, root: Path, before: Optional[float]) -> dict:
    """TRL trains in a process of its own (bench/real_model_trl.py: its memory, 14 GB after a run here, goes back
    when it ends); its merged model is scored by a fresh swarm."""
    roll_args, folder = roll_args_of("trl", seed, args), root / f"trl-{seed}-merged"
    model_path = builtin_model_path(agent_roll.MODEL)
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "bench.real_model_trl", "--model", str(model_path), "--out", str(folder),
           "--threads", str(args.threads), "--minutes", str(args.minutes), "--seed", str(seed)]  # fmt: skip
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    trained = json.loads(done.stdout.strip().splitlines()[-1])  # its last line: the steps and its CPU seconds
    steps, cpu, seconds = trained["steps"], trained["cpu_s"], time.monotonic() - t0
    measured = before is None
    with launched_swarm(root / f"trl-{seed}-eval", "--threads", str(args.threads), timeout=900) as url:
        if before is None:
            before = asyncio.run(folder_score(url, model_path, roll_args, "base"))
        after = asyncio.run(folder_score(url, folder, roll_args, "trained"))
    row = {"figure": "run", "arm": "trl", "seed": seed, "held_out_before": before, "held_out_after": after,
           "steps": steps, "train_seconds": round(seconds, 1), "held_out_before_measured": measured}  # fmt: skip
    return finish_row(row, steps, cpu, args)


def finish_row(row: dict[str, Any], steps: list[dict[str, float]], cpu: float, args: argparse.Namespace) -> dict:
    """The figures every run row carries: the rise, the time to the target, CPU seconds per trained token."""
    tokens = sum(s.get("trained_tokens", 0.0) for s in steps)
    row.update(
        rise=round(row["held_out_after"] - row["held_out_before"], 4), time_to_target=time_to(steps, args.target)
    )
    row.update(cpu_s=round(cpu, 1), cpu_s_per_trained_token=round(cpu / tokens, 5) if tokens else None)
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
        times = [time_to(r["steps"], target) for r in rows]
        emit(BENCH, {
            "figure": "arm", "arm": arm, "seeds": [r["seed"] for r in rows],
            "held_out_before": statistics.fmean(r["held_out_before"] for r in rows),
            "held_out_after": statistics.fmean(r["held_out_after"] for r in rows),
            "rise_mean": statistics.fmean(r["rise"] for r in rows), "every_seed_rose": all(r["rise"] > 0 for r in rows),
            "time_to_target": times, "target": target, "time_to_target_mean_reached": mean_known(times),
            "cpu_s_per_trained_token": mean_known(r["cpu_s_per_trained_token"] for r in rows),
        })  # fmt: skip
    if len(runs) < 2:
        return
    arms = list(runs)
    steps = min(len(r["steps"]) for rows in runs.values() for r in rows)
    seconds = min(r["steps"][-1]["seconds"] for rows in runs.values() for r in rows)
    row: dict[str, Any] = {"figure": "compare", "arms": arms, "equal_steps": steps, "equal_seconds": seconds}
    row["seeds"] = {a: [r["seed"] for r in runs[a]] for a in arms}
    row["target"] = target
    row["reward_at_equal_steps"] = {a: round(at_step(runs[a], steps), 4) for a in arms}
    row["reward_at_equal_seconds"] = {a: round(at_seconds(runs[a], seconds), 4) for a in arms}
    times = {a: [time_to(r["steps"], target) for r in runs[a]] for a in arms}
    mean_t = {a: statistics.fmean(ts) if all(t is not None for t in ts) else None for a, ts in times.items()}
    first = mean_t[arms[0]]  # an arm whose seeds did not all reach the target has no ratio (None)
    row["time_to_target_ratio"] = {a: round(t / first, 3) if t and first else None for a, t in mean_t.items()}
    both = {a: ratio_where_both(times[arms[0]], ts) for a, ts in times.items()}
    row["time_to_target_ratio_where_both_reached"] = both
    emit(BENCH, row)


def ratio_where_both(first: list[Optional[float]], other: list[Optional[float]]) -> Optional[float]:
    """The mean time to the target of `other` over the first arm's, over the seeds both reached it in (None: none)."""
    both = [(a, b) for a, b in zip(first, other) if a is not None and b is not None]
    if not both:
        return None
    return round(statistics.fmean(b for _, b in both) / statistics.fmean(a for a, _ in both), 3)


def rows_of(commits: list[str], arms: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The run rows of `arms` in bench/results/real_model.jsonl written at `commits` (one run cut short and one that
    finished its seeds, say), each (arm, seed) once: the last row of it."""
    path = Path(__file__).resolve().parent / "results" / f"{BENCH}.jsonl"
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("figure") == "run" and row.get("commit") in commits and row["arm"] in arms:
            last[(row["arm"], row["seed"])] = row
    return {arm: [r for (a, _), r in sorted(last.items()) if a == arm] for arm in arms}


def mean_known(values: Iterable[Optional[float]]) -> Optional[float]:
    """The mean of the values measured (None when none was: a figure not measured is not a zero)."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=30.0, help="training time of each run")
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=ARMS)
    ap.add_argument(
        "--export-arms",
        nargs="*",
        choices=ARMS[:2],
        default=None,
        help="swarm arms whose trained model is also exported and scored on a fresh swarm (default: exact; "
        "none with --engine vllm, which does not serve a tied-embedding model without an adapter)",
    )
    engine_help = "the swarm arms' engine (`ajet-swarm start --engine`; vllm: the CPU build in .venv-vllm)"
    ap.add_argument("--engine", choices=["embedded", "vllm"], default="embedded", help=engine_help)
    backend_help = "the swarm arms' training backend (`ajet-swarm start --backend`: verl's actor, or the embedded one)"
    ap.add_argument("--backend", choices=["auto", "embedded", "verl"], default="auto", help=backend_help)
    ap.add_argument("--target", type=float, default=0.7, help="a step's mean reward the time-to-target waits for")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the trainer's torch threads")
    ap.add_argument("--summarise", nargs="+", metavar="COMMIT",
                    help="run nothing: the arm and compare rows of the run rows written at these commits")  # fmt: skip
    args = ap.parse_args()
    if args.export_arms is None:
        args.export_arms = ["exact"] if args.engine == "embedded" else []
    if args.summarise:
        runs = rows_of(args.summarise, args.arms)
        summarise(runs, args.target)
        return
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in args.arms}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-model-") as tmp:
        for seed in args.seeds:  # arms interleaved per seed: a slow spell of the machine hits every arm
            before: Optional[float] = None  # the base model's held-out score, taken by the seed's first arm
            for arm in args.arms:
                if arm == "trl":
                    row = run_trl_arm(seed, args, Path(tmp), before)
                else:
                    row = run_swarm_arm(arm, seed, args, Path(tmp), before)
                before = row["held_out_before"]
                emit(BENCH, row)
                runs[arm].append(row)
    summarise(runs, args.target)
    print(f"# {time.monotonic() - t0:.0f} s in all", flush=True)


if __name__ == "__main__":
    main()

"""A tiny VL model learns from the pixels: `builtin:tiny-vl` and tutorial/example_vision_agent, the seen arm against
the control arm whose screens are one flat grey, for each seed, in one run.

Both arms train the same model with the same job, seeds and steps through `ajet-swarm start` (one swarm per run; a
fresh experiment per arm and seed). The held-out screens (`--held-out` of them, the same for every run) are scored
with greedy eval episodes before and after training. A two-way answer: 0.5 is chance.

One row per (arm, seed): the held-out score before and after, each step's mean reward and time. Then one row per
arm (the seeds' means and the lowest) and one comparing them.

Usage: python -m bench.vision [--seeds 0 1 2] [--max-steps 60] [--tasks-per-step 8] [--group 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ajet_core.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from bench.results import emit

apply_offline_env()

from tutorial.example_vision_agent import agent_roll  # noqa: E402

BENCH = "vision"
ARMS = ("seen", "blank")


def arm_args(args: argparse.Namespace, url: str, arm: str, seed: int) -> argparse.Namespace:
    """The tutorial's arguments for one (arm, seed)."""
    argv = ["--swarm-url", url, "--seed", str(seed), "--max-steps", str(args.max_steps), "--minutes", "120",
            "--tasks-per-step", str(args.tasks_per_step), "--group", str(args.group), "--held-out",
            str(args.held_out), "--lr", str(args.lr), "--experiment", f"vision-{arm}-{seed}", "--quiet"]  # fmt: skip
    return agent_roll.parser().parse_args([*argv, *(["--blank"] if arm == "blank" else [])])


def summary(arm: str, reports: list[agent_roll.RunReport]) -> dict[str, Any]:
    """An arm's row: its seeds' held-out scores after training, their mean and lowest."""
    after = [r.held_out_after for r in reports]
    return {"figure": "arm", "arm": arm, "held_out_after": after, "mean": statistics.mean(after), "min": min(after),
            "held_out_before": [r.held_out_before for r in reports]}  # fmt: skip


def run(args: argparse.Namespace) -> None:
    """Every (arm, seed) on one swarm, then the arm rows and the comparison."""
    reports: dict[str, list[agent_roll.RunReport]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="ajet-bench-vision-") as root:
        with launched_swarm(Path(root), timeout=600) as url:
            for seed in args.seeds:
                for arm in ARMS:
                    report = asyncio.run(agent_roll.run(arm_args(args, url, arm, seed)))
                    reports[arm].append(report)
                    emit(BENCH, {"figure": "run", "arm": arm, **asdict(report)})
    rows = {arm: summary(arm, reports[arm]) for arm in ARMS}
    for row in rows.values():
        emit(BENCH, row)
    emit(BENCH, {"figure": "compare", "seen_over_blank": rows["seen"]["mean"] / max(rows["blank"]["mean"], 1e-9),
                 "seen_min": rows["seen"]["min"], "blank_max": max(rows["blank"]["held_out_after"]),
                 "steps": args.max_steps, "episodes_per_step": args.tasks_per_step * args.group})  # fmt: skip


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--tasks-per-step", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--held-out", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    return ap


if __name__ == "__main__":
    run(parser().parse_args())

"""`make demo`'s main job, N times: how many steps and seconds each run takes to the 0.8 target.

    python -m bench.demo_runs [--runs 10] [--max-steps 300] [--max-staleness 1]

One JSON line per run (steps, seconds from the client's start, first and final reward, whether it reached
the target), then one with the medians and the count that reached the target. Setup (the venv) is not timed;
each run starts a fresh swarm, store and experiment.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from bench.results import emit
from scripts.run_demo import tutorial_summary


def one_run(i: int, max_steps: int, target: float, max_staleness: int) -> dict[str, float]:
    """One demo run's client summary: steps, seconds, first and final reward, reached (1.0 or 0.0)."""
    return tutorial_summary(
        REPO / "experiments" / f"demo_run_{i}",
        target,
        "--max-steps",
        str(max_steps),
        "--max-staleness",
        str(max_staleness),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--max-staleness", type=int, default=0, help="the job's max_staleness (0: the demo's, synchronous)")
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(i, args.max_steps, args.target, args.max_staleness))
        emit("demo_runs", {"bench": "demo_runs", "max_staleness": args.max_staleness, "run": i, **runs[-1]})
    emit(
        "demo_runs",
        {
            "bench": "demo_runs",
            "max_staleness": args.max_staleness,
            "figure": "median",
            "runs": len(runs),
            "reached": int(sum(r["reached"] for r in runs)),
            "median_steps": statistics.median(r["steps"] for r in runs),
            "median_seconds": statistics.median(r["seconds"] for r in runs),
        },
    )


if __name__ == "__main__":
    main()

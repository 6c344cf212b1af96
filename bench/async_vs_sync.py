"""Asynchronous vs synchronous training on the main job, with the update slowed to stand in for a large model.

    python -m bench.async_vs_sync [--update-s 2] [--target 0.8] [--max-steps 200] [--staleness 0 1 2]

For each `max_staleness` k, one run of the tiny-RL tutorial on a fresh swarm, each update sleeping `--update-s`
first (injected by `tests.support.faults`). One JSON line per run: wall seconds to the target (from the client's
start), steps, episodes per second, and the client's idle time (seconds with none of its episodes in flight:
waiting for a step). Then one line of ratios against k = 0 (time to target, idle time).
"""

from __future__ import annotations

import argparse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from bench.results import emit
from scripts.run_demo import tutorial_summary
from tests.support.faults import update_delay_env


def one_run(k: int, update_s: float, target: float, max_steps: int, seed: int) -> dict[str, float]:
    """The tutorial client's summary for one `max_staleness`."""
    return tutorial_summary(
        REPO / "experiments" / f"async_vs_sync_k{k}",
        target,
        "--max-staleness",
        str(k),
        "--max-steps",
        str(max_steps),
        "--seed",
        str(seed),
        env=update_delay_env(update_s),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--update-s", type=float, default=2.0)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    runs = {}
    for k in args.staleness:
        runs[k] = one_run(k, args.update_s, args.target, args.max_steps, args.seed)
        emit(
            "async_vs_sync",
            {
                "bench": "async_vs_sync",
                "max_staleness": k,
                "update_s": args.update_s,
                "target": args.target,
                **runs[k],
            },
        )
    base = runs.get(0)
    if base is None:
        return
    for k, r in runs.items():
        if k == 0:
            continue
        emit(
            "async_vs_sync",
            {
                "bench": "async_vs_sync",
                "figure": "ratio_vs_sync",
                "max_staleness": k,
                "time_to_target_sync_over_async": round(base["seconds"] / r["seconds"], 2),
                "episodes_per_s_async_over_sync": round(r["episodes_per_s"] / base["episodes_per_s"], 2),
                "client_idle_s": r["client_idle_s"],
                "client_idle_s_sync": base["client_idle_s"],
                "both_reached": bool(base["reached"] and r["reached"]),
            },
        )


if __name__ == "__main__":
    main()

"""Where `make demo`'s CPU goes: CPU milliseconds per episode of the client, the proxy and the trainer.

    python -m bench.demo_cpu [--short 5] [--long 25]

The demo's job (the tiny-RL tutorial, synchronous) runs twice on a fresh swarm each time, for `--short` and
for `--long` training steps. Each process's CPU time (user + system) is read after the run; the difference
between the two runs, over the difference in episodes, is the marginal cost of one episode, free of start-up
(imports, model load) and of what a run does once. One JSON line per process (ms per episode), one with their
sum and what it means on this machine: the fewest seconds the demo's episodes take when every core is busy.
On a machine with `cores` cores, reaching 0.8 in `steps` steps of `episodes_per_step` episodes takes at
least steps x episodes_per_step x total_ms / cores, start-up aside (the updates are in the trainer's figure).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]

from bench.results import emit
from scripts.run_demo import run_tutorial, running_swarm
from tutorial.example_tiny_rl.agent_roll import BATCH_SIZE, GRPO_N

EPISODES_PER_STEP = BATCH_SIZE * GRPO_N  # the tutorial's 4 tasks x 16 answers
DEMO_STEPS = 77  # steps to 0.8 in bench/demo_runs.py on 2026-12-03 (seeded: every run on one machine takes the same)


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def swarm_processes() -> dict[str, psutil.Process]:
    """The proxy and the trainer of the `ajet-swarm start` this process launched, by role."""
    return {
        role: p
        for p in psutil.Process().children(recursive=True)
        for role in ("proxy", "trainer")
        if f"ajet_{role}.cli" in p.cmdline()
    }


def run_once(steps: int) -> dict[str, float]:
    """CPU seconds of the client, the proxy and the trainer over a demo run of `steps` steps, and its episodes."""
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with running_swarm(REPO / "experiments" / f"demo_cpu_{steps}") as url:
        swarm = swarm_processes()
        result = run_tutorial(url, "--max-steps", str(steps), "--target", "1.1", "--keep-engine", capture=True)
        # the client: the only child waited for meanwhile (read before the swarm's processes are waited for)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if result.returncode != 0:
            sys.exit(result.stdout[-2000:] + result.stderr[-2000:])
        out = {name: _cpu_s(p) for name, p in swarm.items()}
    out["client"] = after.ru_utime + after.ru_stime - children_before.ru_utime - children_before.ru_stime
    out["episodes"] = json.loads(result.stdout.strip().splitlines()[-1])["episodes"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", type=int, default=5)
    ap.add_argument("--long", type=int, default=25)
    args = ap.parse_args()
    short, long = run_once(args.short), run_once(args.long)
    episodes = long["episodes"] - short["episodes"]
    total = 0.0
    for name in ("client", "proxy", "trainer"):
        ms = 1000.0 * (long[name] - short[name]) / episodes
        total += ms
        emit(
            "demo_cpu", {"bench": "demo_cpu", "process": name, "cpu_ms_per_episode": round(ms, 2), "episodes": episodes}
        )
    cores = os.cpu_count() or 1
    emit(
        "demo_cpu",
        {
            "bench": "demo_cpu",
            "figure": "total",
            "cpu_ms_per_episode": round(total, 2),
            "cores": cores,
            "episodes_per_s_at_most": round(1000.0 * cores / total, 1),
            "demo_seconds_at_least": round(DEMO_STEPS * EPISODES_PER_STEP * total / 1000.0 / cores, 1),
            "demo_steps": DEMO_STEPS,
        },
    )


if __name__ == "__main__":
    main()

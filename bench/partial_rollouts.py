"""Partial rollouts against draining: answers whose lengths follow a lognormal law, through a real swarm.

Each arm starts a fresh swarm (proxy + trainer processes, the embedded engine, builtin:tiny) and a pool of client
threads; each client loops: begin an episode, one call whose answer is exactly L tokens (`min_tokens` =
`max_tokens` = L, L = round(exp(N(log median, sigma))) clipped to [1, --max-len]), end it with a reward. Arms:
- `sync-drain`: the synchronous loop (each update waits for open episodes: ROLLING_POST);
- `sync-partial`: `partial_rollouts=True` (an update does not wait; answers go on across it);
- `async-k1`: `max_staleness=1`; `async-partial`: both.
Per arm, sigma and seed, one JSON line: steps, the mean step period split into waiting, draining and training,
the answers' generated and trained mean lengths, the share of trained calls two versions sampled, the tokens the
engine re-prefilled, the answered tokens per second, and the reward at the end. Then per sigma and seed the ratio
of sync-partial's step period to sync-drain's.

With `--demo-runs N`, also `make demo`'s job N times per arm (synchronous and max_staleness 1, each without and
with partial rollouts): the median steps and seconds to its 0.8 target, and per mode the ratio of the seconds with
partial rollouts to those without.

Usage: python -m bench.partial_rollouts [--sigmas 0.5 1 1.5] [--seeds 0 1 2] [--steps 8] [--clients 12]
                                        [--demo-runs 3]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ajet_core.runtime import apply_offline_env
from bench.results import emit
from scripts.run_demo import tutorial_summary

apply_offline_env()

import openai  # noqa: E402

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput  # noqa: E402
from ajet.errors import AjetError  # noqa: E402
from tests.support.swarm import running_swarm  # noqa: E402

ARMS = {
    "sync-drain": {},
    "sync-partial": {"partial_rollouts": True},
    "async-k1": {"max_staleness": 1},
    "async-partial": {"max_staleness": 1, "partial_rollouts": True},
}


def job(arm: str, max_len: int, seed: int) -> AgentJetJob:
    return AgentJetJob(
        model="builtin:tiny", batch_size=4, num_repeat=2, lr=1e-3, seed=seed, save_freq=0, max_prompt_length=64,
        max_response_length=max_len, max_model_len=max_len + 64, max_response_length_in_one_turn=max_len,
        experiment_name=f"partial-{arm}-{seed}", **ARMS[arm],
    )  # fmt: skip


class Lengths(random.Random):
    """The answers' lengths: lognormal around `median` (tokens) with `sigma`, clipped to [1, max_len]."""

    def __init__(self, sigma: float, median: float, max_len: int, seed: int):
        super().__init__(seed)
        self.sigma, self.median, self.max_len = sigma, median, max_len

    def draw(self) -> int:
        return max(1, min(self.max_len, round(math.exp(self.gauss(math.log(self.median), self.sigma)))))


def client_loop(url: str, stop: threading.Event, rng: Lengths, k: int, answered: list[int]) -> None:
    # fails fast once the arm stops the swarm: no retries, and a begin waits at most 5 s for ROLLING (it rolls
    # again within a step while the arm runs; after the arm's stop_engine it never does)
    client = SwarmClient(url, verbose=False, max_retries=0, begin_episode_max_wait=5.0)
    try:
        while not stop.is_set():
            try:
                uuid, creds = client.begin_episode()
                n = rng.draw()
                creds.as_openai_client(max_retries=2).chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": f"count {k}"}], max_tokens=n,
                    extra_body={"min_tokens": n}, seed=rng.randrange(1 << 30),
                )  # fmt: skip
                client.end_episode(Task(task_id=f"t{rng.randrange(4)}"), uuid, WorkflowOutput(reward=rng.random()))
                answered.append(n)
            except (AjetError, openai.APIError):  # refused while the trainer updates, or the arm stopped the swarm
                if stop.is_set():
                    return
                time.sleep(0.05)
    finally:
        client.close()


def one_arm(arm: str, sigma: float, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ajet-partial-") as tmp, running_swarm(Path(tmp)) as sw:
        boot = SwarmClient(sw.url, verbose=False)
        boot.auto_sync_train_config_and_start_engine(job(arm, args.max_len, seed))
        store, stop, answered = sw.store(), threading.Event(), []
        rng = Lengths(sigma, args.median, args.max_len, seed)
        threads = [threading.Thread(target=client_loop, args=(sw.url, stop, rng, k, answered))
                   for k in range(args.clients)]  # fmt: skip
        t0, started = time.monotonic(), time.time()
        for t in threads:
            t.start()
        while len(store.steps()) < args.steps and time.monotonic() - t0 < args.timeout:
            time.sleep(0.2)
        wall = time.monotonic() - t0
        stop.set()
        steps = store.steps()
        boot.stop_engine()
        for t in threads:
            t.join(60)
        boot.close()
    return summary(arm, sigma, seed, steps, wall, answered, started)


def summary(
    arm: str, sigma: float, seed: int, steps: list[Any], wall: float, answered: list[int], started: float
) -> dict[str, Any]:
    def mean(key: str) -> float:
        values = [s.metrics.get(key, 0.0) for s in steps]
        return round(statistics.mean(values), 3) if values else 0.0

    return {
        "arm": arm, "sigma": sigma, "seed": seed, "steps": len(steps), "wall_s": round(wall, 1),
        "step_period_s": mean("step_s"), "waiting_s": mean("wait_s"), "draining_s": mean("drain_s"),
        "training_s": mean("train_s"), "generated_answer_tokens": mean("partial/generated_answer_tokens_mean"),
        "trained_answer_tokens": mean("partial/trained_answer_tokens_mean"),
        "mixed_version_share": mean("partial/mixed_version_share"),
        "reprefilled_tokens_per_step": mean("partial/reprefilled_tokens"),
        "engine_busy_share": mean("engine/busy_share"),
        "answered_tokens_per_s": round(sum(answered) / wall, 1) if wall else 0.0,
        "final_reward": round(steps[-1].reward_mean or 0.0, 3) if steps else None,
        "reward_by_step": [[s.step, round(s.finished_at - started, 2), round(s.reward_mean or 0.0, 3)] for s in steps],
    }  # fmt: skip


def demo_arms(runs: int) -> None:
    """`make demo`'s job `runs` times per arm: median steps and seconds to the target, and the ratio per mode."""
    medians: dict[tuple[int, bool], float] = {}
    for staleness in (0, 1):
        for partial in (False, True):
            flags = ["--max-staleness", str(staleness)] + (["--partial-rollouts"] if partial else [])
            with tempfile.TemporaryDirectory(prefix="ajet-partial-demo-") as tmp:
                rows = [tutorial_summary(Path(tmp) / f"run_{i}", 0.8, "--seed", str(i), *flags) for i in range(runs)]
            medians[staleness, partial] = statistics.median(r["seconds"] for r in rows)
            emit("partial_rollouts", {"figure": "demo", "max_staleness": staleness, "partial_rollouts": partial,
                                      "runs": runs, "reached": int(sum(r["reached"] for r in rows)),
                                      "median_steps": statistics.median(r["steps"] for r in rows),
                                      "median_seconds": medians[staleness, partial]})  # fmt: skip
        emit("partial_rollouts", {"figure": "demo_ratio", "max_staleness": staleness,
                                  "partial_over_without_seconds": round(medians[staleness, True]
                                                                        / medians[staleness, False], 3)})  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.5, 1.0, 1.5])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--median", type=float, default=12.0, help="the answers' median length (tokens)")
    ap.add_argument("--max-len", type=int, default=192)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--demo-runs", type=int, default=0, help="also time make demo's job to its target, N runs an arm")
    args = ap.parse_args()
    if args.demo_runs:
        demo_arms(args.demo_runs)
    for sigma in args.sigmas:
        for seed in args.seeds:
            rows = {arm: one_arm(arm, sigma, seed, args) for arm in args.arms}
            for row in rows.values():
                emit("partial_rollouts", {"figure": "arm", **row})
            if "sync-drain" in rows and "sync-partial" in rows:
                drain, partial = rows["sync-drain"]["step_period_s"], rows["sync-partial"]["step_period_s"]
                emit("partial_rollouts", {"figure": "ratio", "sigma": sigma, "seed": seed,
                                          "sync_partial_over_sync_drain_step_period": round(partial / drain, 3)
                                          if drain else None})  # fmt: skip


if __name__ == "__main__":
    main()

"""The tiny-RL tutorial trained through real vLLM (`--engine vllm`), full fine-tuning and LoRA, beside the
embedded engine on the same job, in one run.

    python -m bench.vllm_learning [--steps 60] [--modes full,lora,embedded]

One JSON line per figure: per mode, the reward curve (`curve`: the mean reward of every step), vLLM's
start-up time, the mean step time, the weight-sync time per step (`publish_s`), the engine-vs-trainer
log-prob gap (mean of the steps' means, and the largest per-token gap seen), and the step-time ratio of
each vLLM mode to the embedded engine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from bench.results import emit
from scripts.run_demo import run_tutorial, running_swarm

MODES = {"full": ("vllm", 0), "lora": ("vllm", 8), "embedded": ("embedded", 0)}


def run_mode(mode: str, steps: int, lr_full: float, lr_lora: float) -> dict[str, object]:
    engine, rank = MODES[mode]
    root = REPO / "experiments" / f"bench_vllm_{mode}"
    lr = lr_lora if rank else lr_full
    with running_swarm(root, "--engine", engine, "--log-level", "info") as url:  # info: vLLM's start-up time
        out = run_tutorial(
            url,
            "--max-steps",
            str(steps),
            "--target",
            "2",
            "--lr",
            str(lr),
            "--lora-rank",
            str(rank),
            "--fresh",
            capture=True,
            timeout=3600,
        )
    if out.returncode != 0:
        raise SystemExit(f"{mode}: the tutorial failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    rows = [json.loads(line) for line in (root / "experiment" / "metrics.jsonl").read_text().splitlines()]
    log = (root / "swarm.log").read_text()
    startup = re.findall(r"ready after (\d+) s", log)
    return {
        "bench": "vllm_learning",
        "mode": mode,
        "engine": engine,
        "lora_rank": rank,
        "lr": lr,
        "steps": len(rows),
        "curve": [round(r["reward_mean"], 3) for r in rows],
        "step_s_mean": round(statistics.fmean(r["step_s"] for r in rows), 3),
        "publish_s_mean": round(statistics.fmean(r.get("publish_s", 0.0) for r in rows), 4),
        "logprob_gap_mean": round(statistics.fmean(r.get("logprob_gap", 0.0) for r in rows), 6),
        "logprob_gap_max": round(max(r.get("logprob_gap_max", 0.0) for r in rows), 6),
        "vllm_startup_s": int(startup[0]) if startup else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--modes", default="full,lora,embedded")
    ap.add_argument("--lr-full", type=float, default=2e-3, help="the lr of the results in bench/results")
    ap.add_argument("--lr-lora", type=float, default=2e-2, help="LoRA moves fewer weights: a larger step")
    args = ap.parse_args()
    results = {}
    for mode in args.modes.split(","):
        results[mode] = run_mode(mode, args.steps, args.lr_full, args.lr_lora)
        emit("vllm_learning", results[mode])
    if "embedded" in results:
        for mode in ("full", "lora"):
            if mode in results:
                ratio = results[mode]["step_s_mean"] / results["embedded"]["step_s_mean"]
                emit(
                    "vllm_learning",
                    {
                        "bench": "vllm_learning",
                        "figure": "step_time_ratio_vs_embedded",
                        "mode": mode,
                        "ratio": round(ratio, 3),
                    },
                )


if __name__ == "__main__":
    main()

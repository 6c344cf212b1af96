"""The demo's task, side by side in one run: the swarm (`make demo`'s job: proxy, store, trainer, the tutorial's
client over HTTP) against TRL's `GRPOTrainer` in one process, on the same model (the demo's, builtin:demo), the same
four "Say the letter" prompts, groups of 16, one new token, the demo's lr and KL loss towards the initial policy
(`agent_roll.LR`, `KL_COEF`) and the same rule reward. TRL has no entropy bonus (the demo's has no counterpart
there) and samples with `model.generate`. One JSON line per side (steps and seconds to a step reward of 0.8, model
load aside), then the ratio of the seconds.

Usage: python -m bench.demo_vs_trl [--max-steps 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from scripts.run_demo import tutorial_summary
from tutorial.example_tiny_rl.agent_roll import BATCH_SIZE, GRPO_N, KL_COEF, LR, MODEL, training_tasks
from tutorial.example_tiny_rl.agent_run import compute_reward

TARGET = 0.8


def run_swarm(max_steps: int, seed: int) -> dict[str, float]:
    """The demo itself, on a fresh swarm: its client's summary (seconds from the client's start)."""
    root = REPO / "experiments" / "demo_vs_trl"
    out = tutorial_summary(root, TARGET, "--max-steps", str(max_steps), "--seed", str(seed))
    return {"steps": out["steps"], "seconds": out["seconds"], "final_reward": out["final_reward"]}


def run_trl(max_steps: int, seed: int, tmp: Path) -> dict[str, float]:
    """TRL's GRPOTrainer on the same prompts until a step's mean reward reaches the target."""
    from transformers import TrainerCallback

    from ajet_trainer.tiny_model import builtin_model_path
    from bench.trainer_vs_trl import cpu_grpo_trainer

    torch.set_num_threads(1)
    path = builtin_model_path(MODEL)
    tasks = {t.main_query: t for t in training_tasks()}
    # one step takes each of the demo's prompts once (16 answers each): an epoch of max_steps steps
    rows = [{"prompt": [{"role": "user", "content": q}], "query": q} for _ in range(max_steps) for q in tasks]

    def letter_reward(completions, query, **_kw):
        return [compute_reward(tasks[q], c[0]["content"]) for c, q in zip(completions, query)]

    trainer = cpu_grpo_trainer(
        path,
        rows,
        letter_reward,
        tmp / "trl",
        per_device_train_batch_size=BATCH_SIZE * GRPO_N,
        num_generations=GRPO_N,
        max_completion_length=1,
        learning_rate=LR,
        beta=KL_COEF,
        max_steps=max_steps,
        num_train_epochs=1,
        seed=seed,
    )
    rewards: list[float] = []

    class StopAtTarget(TrainerCallback):
        def on_log(self, _args, _state, control, logs=None, **_kw):
            if logs and "reward" in logs:
                rewards.append(logs["reward"])
                control.should_training_stop = logs["reward"] >= TARGET

    trainer.add_callback(StopAtTarget())
    t0 = time.monotonic()
    trainer.train()
    return {"steps": len(rewards), "seconds": round(time.monotonic() - t0, 1), "final_reward": rewards[-1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    swarm = run_swarm(args.max_steps, args.seed)
    emit("demo_vs_trl", {"bench": "demo_vs_trl", "side": "swarm", **swarm})
    trl = run_trl(args.max_steps, args.seed, Path(tempfile.mkdtemp(prefix="ajet-demo-vs-trl-")))
    emit("demo_vs_trl", {"bench": "demo_vs_trl", "side": "trl", **trl})
    both = swarm["final_reward"] >= TARGET and trl["final_reward"] >= TARGET
    ratio = round(swarm["seconds"] / trl["seconds"], 2) if both else None
    figure = {"bench": "demo_vs_trl", "figure": "ratio", "swarm_over_trl_seconds": ratio, "both_reached": both}
    emit("demo_vs_trl", figure)


if __name__ == "__main__":
    main()

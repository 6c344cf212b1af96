"""The demo's learning dynamics without the plumbing: how many steps and episodes each demo design needs to 0.8.

    python -m bench.demo_learning_sim [--seeds 0 1 2 3 4 5] [--max-steps 300]

The tiny-RL tutorial's loop in one process: the model samples each task's prompt x 16 answers (one token,
temperature 1), the rule scores them, and the embedded trainer's own `Learner.update` makes the GRPO step, as the
swarm does but without HTTP (seconds a hundred steps, not minutes). Two designs side by side, each over the same
seeds, both at lr 2e-3 with an entropy bonus and a KL loss towards the initial policy: the demo's former one
(`builtin:tiny`, eight letters a batch, both coefficients 0.05) and today's (`builtin:demo`, weights drawn at std
0.05, four letters, both coefficients 0.1).
One JSON line per design (the steps of each seed, how many reached the target, the medians of steps and of
episodes), then the ratio of the median episodes. A seed that never reaches the target counts as `--max-steps`.
"""

from __future__ import annotations

import argparse
import random
import statistics
from multiprocessing import Pool
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from ajet.job import AgentJetJob
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import resolve_model_path
from ajet_trainer.types import EpisodeSample, TrainSequence
from tutorial.example_tiny_rl.agent_roll import ENTROPY_COEFF, GRPO_N, KL_COEF, LETTERS, LR, MODEL, training_tasks
from tutorial.example_tiny_rl.agent_run import compute_reward

SETTINGS: dict[str, dict[str, Any]] = {
    "tiny_8_letters": {"model": "builtin:tiny", "letters": 8, "lr": 2e-3, "entropy_coeff": 0.05, "kl_loss_coef": 0.05},
    "demo_4_letters": {
        "model": MODEL,
        "letters": LETTERS,
        "lr": LR,
        "entropy_coeff": ENTROPY_COEFF,
        "kl_loss_coef": KL_COEF,
    },
}


def steps_to_target(setting: dict[str, Any], seed: int, max_steps: int, target: float) -> int:
    """Training steps until a step's mean reward reaches `target` (`max_steps` if it never does)."""
    torch.set_num_threads(1)
    tasks = training_tasks(setting["letters"])
    job = AgentJetJob(
        model=setting["model"],
        batch_size=len(tasks),
        num_repeat=GRPO_N,
        seed=seed,
        n_gpu=1,
        lr=setting["lr"],
        entropy_coeff=setting["entropy_coeff"],
        use_kl_loss=True,
        kl_loss_coef=setting["kl_loss_coef"],
    )
    torch.manual_seed(seed)
    model, tok = load_policy(str(resolve_model_path(job.model)), job, "cpu")
    learner = Learner(model, tok, job)
    prompts = [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": t.main_query}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
        )
        for t in tasks
    ]
    gen, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for step in range(1, max_steps + 1):
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor(prompts)).logits[:, -1, :].float(), -1)
        samples = []
        for i, task in enumerate(tasks):
            for token in torch.multinomial(logp[i].exp(), GRPO_N, replacement=True, generator=gen).tolist():
                uuid = f"{step}-{i}-{rng.random()}"
                seq = TrainSequence(uuid, task.task_id, tuple(prompts[i]), (token,), (1,), (float(logp[i, token]),))
                samples.append(EpisodeSample(uuid, task.task_id, compute_reward(task, tok.decode([token])), (seq,)))
        if learner.update(samples, seed=step)["reward_mean"] >= target:
            return step
    return max_steps


def _run(args: tuple[str, int, int, float]) -> tuple[str, int, int]:
    name, seed, max_steps, target = args
    return name, seed, steps_to_target(SETTINGS[name], seed, max_steps, target)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(6)))
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    jobs = [(name, seed, args.max_steps, args.target) for name in SETTINGS for seed in args.seeds]
    with Pool(args.procs) as pool:
        results = pool.map(_run, jobs)
    episodes = {}
    for name, setting in SETTINGS.items():
        steps = [s for n, _seed, s in results if n == name]
        episodes[name] = statistics.median(steps) * setting["letters"] * GRPO_N
        line = {"bench": "demo_learning_sim", "setting": name, **setting, "seeds": args.seeds}
        line["steps"] = steps
        line.update(reached=sum(s < args.max_steps for s in steps), median_steps=statistics.median(steps))
        emit("demo_learning_sim", {**line, "median_episodes": episodes[name]})
    old, new = episodes.values()
    ratio = {"bench": "demo_learning_sim", "figure": "ratio", "median_episodes_new_over_old": round(new / old, 2)}
    emit("demo_learning_sim", ratio)


if __name__ == "__main__":
    main()

"""verl's actor (CPU platform, Ray, FSDP2) vs the embedded learner: seconds per training step, same batch.

Both sides train the same fixed batch (`--groups` tasks x `--group` episodes, prompts and responses of
`--prompt`/`--response` tokens, rewards spread in each group), with the same job (model, lr, LoRA rank,
one epoch, one mini-batch), `--steps` times after one warm-up step. verl's step is its driver's
`fit_step` (old log-probs, advantages, `update_actor`, then the weights pulled into a served model, as
`--backend verl --engine embedded` does); the embedded step is `Learner.update`. One JSON line per
figure, then the ratios (verl / embedded).

Usage: python -m bench.verl_actor_vs_embedded [--model builtin:tiny] [--lora 0] [--steps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from ajet import AgentJetJob
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import EpisodeSample, TrainSequence
from tests.support.verl_actor import verl_cpu_trainer


def batch(groups: int, group: int, prompt: int, response: int) -> list[EpisodeSample]:
    """A fixed batch: episode k of a group has reward k / (group - 1) and tokens that differ per episode."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for t in range(groups):
        for k in range(group):
            uuid, task = f"t{t}-{k}", f"t{t}"
            p = tuple(int(x) for x in torch.randint(10, 100, (prompt,), generator=gen))
            r = tuple(int(x) for x in torch.randint(10, 100, (response,), generator=gen))
            out.append(
                EpisodeSample(
                    uuid,
                    task,
                    k / max(1, group - 1),
                    (TrainSequence(uuid, task, p, r, (1,) * response, (-1.0,) * response),),
                )
            )
    return out


def verl_steps(job: AgentJetJob, samples: list[EpisodeSample], steps: int, exp: Path) -> list[dict[str, float]]:
    from ajet_trainer.policy import load_policy
    from ajet_trainer.verl.beside import load_weights

    served, _ = load_policy(str(builtin_model_path(job.model)), job, "cpu")
    out = []
    with verl_cpu_trainer(job, exp, lambda w: load_weights(served, w)) as trainer:
        for _ in range(steps + 1):
            t0 = time.perf_counter()
            m = trainer.train_samples(samples)
            out.append(
                {
                    "step_s": time.perf_counter() - t0,
                    "update_s": m["timing_s/update_actor"],
                    "old_log_prob_s": m.get("timing_s/old_log_prob", 0.0),
                    "pull_s": m.get("timing_s/pull_weights", 0.0),
                    "loss": m["actor/pg_loss"],
                }
            )
    return out[1:]


def embedded_steps(job: AgentJetJob, samples: list[EpisodeSample], steps: int) -> list[dict[str, float]]:
    from ajet_trainer.embedded.learner import Learner
    from ajet_trainer.policy import load_policy

    model, tokenizer = load_policy(str(builtin_model_path(job.model)), job, "cpu")
    learner = Learner(model, tokenizer, job)
    out = []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        m = learner.update(samples, seed=step)
        out.append({"step_s": time.perf_counter() - t0, "update_s": m["update_s"], "loss": m["pg_loss"]})
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:tiny")
    ap.add_argument("--lora", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=48)
    ap.add_argument("--response", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the trainer's default (AJET_TORCH_THREADS); verl's worker gets one CPU from Ray
    samples = batch(args.groups, args.group, args.prompt, args.response)
    with tempfile.TemporaryDirectory() as tmp:
        job = AgentJetJob(
            model=args.model,
            n_gpu=1,
            batch_size=args.groups,
            num_repeat=args.group,
            lr=1e-3,
            lora_rank=args.lora,
            save_freq=0,
            ensure_new_experiment=True,
            experiment_dir=tmp,
            max_prompt_length=args.prompt,
            max_response_length=args.response,
            max_model_len=args.prompt + args.response,
        )
        sides = {
            "embedded": embedded_steps(job, samples, args.steps),
            "verl_actor_cpu": verl_steps(job, samples, args.steps, Path(tmp)),
        }
    common = {
        "bench": "verl_actor_vs_embedded",
        "model": args.model,
        "lora_rank": args.lora,
        "episodes": len(samples),
        "tokens_per_episode": args.prompt + args.response,
        "steps": args.steps,
    }
    med = {}
    for side, rows in sides.items():
        med[side] = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "loss"}
        emit(
            "verl_actor_vs_embedded",
            {**common, "side": side, **{f"median_{k}": round(v, 4) for k, v in med[side].items()}},
        )
    emit(
        "verl_actor_vs_embedded",
        {
            **common,
            "figure": "ratio_verl_over_embedded",
            "step_s": round(med["verl_actor_cpu"]["step_s"] / med["embedded"]["step_s"], 2),
            "update_s": round(med["verl_actor_cpu"]["update_s"] / med["embedded"]["update_s"], 2),
        },
    )


if __name__ == "__main__":
    main()

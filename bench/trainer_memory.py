"""Where a trainer's memory goes with two SmolLM2-135M-Instruct experiments (LoRA adapters on one base, as
`embedded/shared_base.py` trains them), and what an update leaves held after it.

    python -m bench.trainer_memory [--episodes 16] [--prompt 120] [--response 40] [--rounds 2]

Each arm runs in a fresh process: the base loaded with two adapters, two learners, then `--rounds` rounds of one
GRPO update per experiment on `--episodes` synthetic sequences (random ids, half the episodes rewarded); the peak
is the kernel's (`ru_maxrss`) of the arm's process. The arms: `kept` (an update's freed activations stay with the
allocator, as before `ajet_trainer.freed_memory`) and `given_back` (the learner hands them back after each update).
One row per arm (memory loaded, the updates' peak, held after each update) and one with the ratio of held memory
over the loaded model's (`bench/results/trainer_memory.jsonl`).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from typing import Any

import psutil

from bench.results import emit
from bench.store_scale import peak_rss_mb

BENCH = "trainer_memory"
MODEL = "builtin:smollm2-135m-instruct"
ADAPTERS = ("ea", "eb")
MIB = 1 << 20


def now_mib() -> float:
    """The process's resident memory now."""
    return round(psutil.Process().memory_info().rss / MIB, 1)


def samples(args: argparse.Namespace, seed: int) -> list[Any]:
    from ajet_store.types import TrainSequence
    from ajet_trainer.types import EpisodeSample

    rng, out = random.Random(seed), []
    for i in range(args.episodes):
        task = f"t{i // 4}"
        ids = [rng.randrange(1000, 40000) for _ in range(args.prompt + args.response)]
        seq = TrainSequence(f"e{i}", task, tuple(ids[: args.prompt]), tuple(ids[args.prompt :]),
                            (1,) * args.response, (-2.0,) * args.response)  # fmt: skip
        out.append(EpisodeSample(f"e{i}", task, float(i % 2), (seq,)))
    return out


def arm(args: argparse.Namespace) -> dict[str, object]:
    """One arm, in this process: the memory figures."""
    from ajet import AgentJetJob
    from ajet_trainer.embedded import learner as learner_module
    from ajet_trainer.embedded.learner import Learner
    from ajet_trainer.policy import load_policy, lora_config
    from ajet_trainer.tiny_model import resolve_model_path

    if args.arm == "kept":
        learner_module.give_back_freed_memory = lambda: False  # the learner as it was
    start = now_mib()
    job = AgentJetJob(project_name="memory", experiment_name="ea", model=MODEL, batch_size=args.episodes // 4,
                      num_repeat=4, lora_rank=16, lora_alpha=32, max_prompt_length=1024, max_response_length=512,
                      max_response_length_in_one_turn=64, max_model_len=2048, n_gpu=1)  # fmt: skip
    model, tokenizer = load_policy(str(resolve_model_path(MODEL)), job, "cpu", adapter=ADAPTERS[0])
    model.add_adapter(ADAPTERS[1], lora_config(job))
    learners = [Learner(model, tokenizer, job, adapter=name) for name in ADAPTERS]
    loaded, held = now_mib(), []
    for r in range(args.rounds):
        for i, learner in enumerate(learners):
            learner.update(samples(args, r * 10 + i), seed=r)
            held.append(now_mib())
    return {"start_mib": start, "loaded_mib": loaded, "peak_mib": peak_rss_mb(), "held_mib": held}


def run_arm(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """An arm in a fresh process (resident memory is a process's)."""
    cmd = [sys.executable, "-m", "bench.trainer_memory", "--arm", name, "--episodes", str(args.episodes),
           "--prompt", str(args.prompt), "--response", str(args.response), "--rounds", str(args.rounds)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"arm {name} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=120, help="prompt tokens of each sequence")
    ap.add_argument("--response", type=int, default=40, help="response tokens of each sequence")
    ap.add_argument("--rounds", type=int, default=2, help="updates of each experiment")
    ap.add_argument("--arm", choices=("kept", "given_back"), help="run one arm here and print its figures")
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args)))
        return
    shape = {"experiments": len(ADAPTERS), "episodes": args.episodes, "tokens": args.prompt + args.response}
    rows: dict[str, dict[str, Any]] = {}
    for name in ("kept", "given_back"):
        rows[name] = run_arm(name, args)
        emit(BENCH, {"figure": "arm", "arm": name, "model": MODEL, **shape, **rows[name]})
    over = {n: round(r["held_mib"][-1] - r["loaded_mib"], 1) for n, r in rows.items()}
    emit(BENCH, {"figure": "held_over_loaded", **shape, "kept_mib": over["kept"], "given_back_mib": over["given_back"],
                 "ratio": round(over["kept"] / max(over["given_back"], 1.0), 1)})  # fmt: skip


if __name__ == "__main__":
    main()

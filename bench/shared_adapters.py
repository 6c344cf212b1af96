"""Several experiments' adapters on one base, trained together against one after another (the engine and learner
parts of issue 40's experiments, without the swarm around them).

Three LoRA adapters on builtin:demo, one prompt, conflicting rewards (`a`, `b`, `c`; tests/support/adapter_letters.py).
Together: each step samples all three in one mixed-adapter batch and updates each with its own learner. One after
another: the same three on the same kind of model, each trained alone to the target before the next starts (one
adapter's rows per batch). Per seed one JSON line per arm (steps each adapter took, wall seconds until all three
reached 0.8), then the ratio of together's seconds to one-after-another's. Then, trained together with LoRA on every
linear layer but the output layer (peft's "all-linear", the job's default targets), each adapter's best five-step
mean reward in `--max-steps` steps: on this random base it stalls far below the target.

Usage: python -m bench.shared_adapters [--seeds 0 1 2] [--max-steps 200]
"""

from __future__ import annotations

import argparse

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

from tests.support.adapter_letters import ALL_LINEAR, letter_model, train_letters  # noqa: E402

LETTERS = {"ea": "a", "eb": "b", "ec": "c"}


def together(seed: int, max_steps: int) -> tuple[float, dict[str, int], bool]:
    model, tok = letter_model(list(LETTERS), seed)
    run = train_letters(model, tok, LETTERS, max_steps)
    return run.seconds, run.steps, run.reached(0.8)


def one_after_another(seed: int, max_steps: int) -> tuple[float, dict[str, int], bool]:
    model, tok = letter_model(list(LETTERS), seed)
    seconds, steps, reached = 0.0, {}, True
    for name, letter in LETTERS.items():
        run = train_letters(model, tok, {name: letter}, max_steps)
        seconds, reached = seconds + run.seconds, reached and run.reached(0.8)
        steps.update(run.steps)
    return seconds, steps, reached


def without_output_layer(seed: int, max_steps: int) -> dict[str, float]:
    """Each adapter's best five-step mean reward, trained together with peft's "all-linear" targets."""
    model, tok = letter_model(list(LETTERS), seed, ALL_LINEAR)
    run = train_letters(model, tok, LETTERS, max_steps)
    return {name: round(value, 3) for name, value in run.best.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-steps", type=int, default=200)
    args = ap.parse_args()
    for seed in args.seeds:
        rows = {}
        for arm, fn in (("together", together), ("one_after_another", one_after_another)):
            seconds, steps, reached = fn(seed, args.max_steps)
            rows[arm] = seconds
            emit("shared_adapters", {"figure": "arm", "arm": arm, "seed": seed, "seconds": round(seconds, 2),
                                     "steps": steps, "all_reached_0_8": reached})  # fmt: skip
        ratio = round(rows["together"] / rows["one_after_another"], 3)
        emit("shared_adapters", {"figure": "ratio", "seed": seed, "together_over_one_after_another_seconds": ratio})
        emit("shared_adapters", {"figure": "all_linear_without_lm_head", "seed": seed, "steps": args.max_steps,
                                 "best_5_step_reward": without_output_layer(seed, args.max_steps)})  # fmt: skip


if __name__ == "__main__":
    main()

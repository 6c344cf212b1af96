"""The embedded engine's batch sampling against transformers' own `generate`, side by side in one run.

    python -m bench.engine_generate [--model builtin:small] [--batch 128] [--tokens 64] [--repeats 3]

One batch of `--batch` identical chat prompts, at most `--tokens` new tokens each at temperature 1, on one CPU
thread; an answer ends at the model's end tokens, so rows finish at different steps (an untrained model says one
now and then), as real answers do. One JSON line per
side (the median seconds of `--repeats` batches, the first untimed), then the ratio. TRL's GRPOTrainer samples with
`generate`, so this is the engine's share of `bench/trainer_vs_trl.py`'s step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest
from ajet_trainer.tiny_model import resolve_model_path


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:small")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    path = resolve_model_path(args.model)
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    messages = [{"role": "user", "content": "Say the letter: a"}]
    prompt = list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    ends = eos_token_ids(model, tok)

    @torch.no_grad()
    def engine() -> object:
        return generate_batch(model, tok, [GenRequest(list(prompt), args.tokens) for _ in range(args.batch)], ends)

    @torch.no_grad()
    def generate() -> object:
        ids = torch.tensor([prompt] * args.batch)
        return model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            max_new_tokens=args.tokens, eos_token_id=sorted(ends), pad_token_id=tok.pad_token_id,
        )  # fmt: skip

    figures = {name: timed(fn, args.repeats) for name, fn in (("engine", engine), ("generate", generate))}
    for name, seconds in figures.items():
        line = {"bench": "engine_generate", "side": name, "model": args.model, "batch": args.batch}
        emit("engine_generate", {**line, "tokens": args.tokens, "seconds": round(seconds, 3)})
    ratio = round(figures["engine"] / figures["generate"], 2)
    emit("engine_generate", {"bench": "engine_generate", "figure": "ratio", "engine_over_generate": ratio})


if __name__ == "__main__":
    main()

"""A batch whose rows are all of one LoRA adapter (an experiment beside others on a shared base, its calls batched
together): peft's mixed-adapter path (`adapter_names=`, what the embedded engine passed for any row naming an
adapter) against its plain path with that adapter made active in the LoRA layers for each forward
(`ajet_trainer.embedded.adapters.BatchAdapters`).

SmolLM2-135M-Instruct with two adapters of rank 16 on every linear layer (the tool tutorial's), the other adapter
active; `--batch` rows of a `--prompt`-token prompt, prefilled, then `--tokens` greedy decoding steps with the KV
cache, one torch thread. The arms alternate, `--repeats` times. Rows: each arm's median seconds (prefill, decode),
their ratio (plain over mixed), and whether both arms decoded the same tokens.

Usage: python -m bench.adapter_batches [--batch 16] [--prompt 300] [--tokens 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Callable

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from ajet_core.runtime import apply_offline_env
from ajet_trainer.embedded.adapters import batch_adapters
from ajet_trainer.tiny_model import builtin_model_path
from bench.results import emit

BENCH = "adapter_batches"
MODEL = "builtin:smollm2-135m-instruct"


def decode(model, ids: torch.Tensor, tokens: int, kwargs: dict, around: Callable[[], AbstractContextManager]
           ) -> tuple[float, float, list[list[int]]]:  # fmt: skip
    """Seconds of the prefill and of `tokens` greedy steps, and the tokens decoded."""
    with torch.no_grad():
        t0 = time.perf_counter()
        with around():
            out = model(input_ids=ids, use_cache=True, **kwargs)
        prefill, past, nxt = time.perf_counter() - t0, out.past_key_values, out.logits[:, -1:].argmax(-1)
        got = [nxt]
        t0 = time.perf_counter()
        for _ in range(tokens - 1):
            with around():
                out = model(input_ids=nxt, past_key_values=past, use_cache=True, **kwargs)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            got.append(nxt)
    return prefill, time.perf_counter() - t0, torch.cat(got, dim=1).tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    apply_offline_env()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(builtin_model_path(MODEL))), copy.deepcopy(config))
    model.add_adapter("other", copy.deepcopy(config))
    model.eval()  # "default" stays active: the batch's rows are all of "other"
    ids = torch.randint(0, 10_000, (args.batch, args.prompt))
    plain = batch_adapters(model, ["other"] * args.batch)
    arms = {"mixed": ({"adapter_names": ["other"] * args.batch}, nullcontext), "plain": ({}, plain.forward)}
    times: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    tokens: dict[str, list[list[int]]] = {}
    for _ in range(args.repeats):
        for arm, (kwargs, around) in arms.items():
            prefill, steps, tokens[arm] = decode(model, ids, args.tokens, kwargs, around)
            times[arm].append((prefill, steps))
    med = {arm: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for arm, v in times.items()}
    emit(BENCH, {"figure": "compare", "batch": args.batch, "prompt": args.prompt, "tokens": args.tokens,
                 "repeats": args.repeats, "mixed_prefill_s": round(med["mixed"][0], 3),
                 "mixed_decode_s": round(med["mixed"][1], 3), "plain_prefill_s": round(med["plain"][0], 3),
                 "plain_decode_s": round(med["plain"][1], 3),
                 "plain_over_mixed_decode": round(med["plain"][1] / med["mixed"][1], 3),
                 "plain_over_mixed_prefill": round(med["plain"][0] / med["mixed"][0], 3),
                 "same_tokens": tokens["mixed"] == tokens["plain"]})  # fmt: skip


if __name__ == "__main__":
    main()

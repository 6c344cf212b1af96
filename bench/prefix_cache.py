"""The embedded engine's prefix cache on a tool agent's episodes: each episode's second call with the cache (it
prefills only its new tokens) against without (its whole history again), in one run.

    python -m bench.prefix_cache [--model builtin:smollm2-135m-instruct] [--tasks 4] [--group 4] [--tokens 48]
                                 [--repeats 3] [--threads 1]

The episodes are the tool tutorial's (tutorial/example_tool_agent): `--tasks` questions, `--group` episodes each (a
GRPO group), the tutorial's system prompt and calculator tool rendered by the model's chat template. The first calls
(seeded, temperature 1, at most `--tokens`) run as one batch; each second call's prompt is its first call's prompt,
its answer and a tool turn (what the token history sends), and the second calls run as the next batch. Both arms
sample the same tokens (seeded rows; checked). Arms alternate, `--repeats` times each after one untimed round. One
row per arm (the median seconds of the first and second batches, and the prompt tokens the second prefilled), then
the ratio of the second batches' seconds, cached over whole.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Optional

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from ajet_trainer.embedded.generation import generate_batch  # noqa: E402
from ajet_trainer.embedded.prefix_cache import PrefixCache  # noqa: E402
from ajet_trainer.embedded.server import eos_token_ids  # noqa: E402
from ajet_trainer.embedded.types import GenRequest  # noqa: E402
from ajet_trainer.tiny_model import resolve_model_path  # noqa: E402
from tutorial.example_tool_agent.agent_run import opening  # noqa: E402
from tutorial.example_tool_agent.calculator import TOOL_SPEC  # noqa: E402
from tutorial.example_tool_agent.tasks import split_tasks  # noqa: E402

BENCH = "prefix_cache"
TOOL_TURN = "\n<|im_start|>tool\n= 4042<|im_end|>\n<|im_start|>assistant\n"
"""The ids a tool's answer adds to a history (ChatML, SmolLM2's and Qwen's turns)."""


def first_prompts(tok: AutoTokenizer, tasks: int) -> list[list[int]]:
    """The first call's prompt of each of `tasks` training questions, as the chat template renders it."""
    train, _held_out = split_tasks()
    out = []
    for task in train[:tasks]:
        rendered = tok.apply_chat_template(opening(task), tools=[TOOL_SPEC], add_generation_prompt=True, tokenize=True)
        out.append(list(rendered["input_ids"]))
    return out


def run_arm(model, tok, prompts: list[list[int]], args, cache: Optional[PrefixCache]) -> dict[str, object]:
    """Both batches of one arm: their seconds, the second batch's prompt tokens and those found, and every answer."""
    ends = eos_token_ids(model, tok)
    firsts = [GenRequest(list(p), args.tokens, seed=i) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    answers = generate_batch(model, tok, firsts, ends, 0, prefixes=cache)
    t1 = time.perf_counter()
    turn = tok.encode(TOOL_TURN, add_special_tokens=False)
    seconds = [GenRequest(r.prompt_ids + a.token_ids + turn, args.tokens, seed=100 + i)
               for i, (r, a) in enumerate(zip(firsts, answers))]  # fmt: skip
    found = cache.stats.hit_tokens if cache is not None else 0
    again = generate_batch(model, tok, seconds, ends, 0, prefixes=cache)
    t2 = time.perf_counter()
    return {
        "first_s": t1 - t0,
        "second_s": t2 - t1,
        "second_prompt_tokens": sum(len(r.prompt_ids) for r in seconds),
        "found_tokens": (cache.stats.hit_tokens - found) if cache is not None else 0,
        "answers": [a.token_ids for a in answers + again],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the trainer's default: 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path(args.model)
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    prompts = [p for p in first_prompts(tok, args.tasks) for _ in range(args.group)]
    runs: dict[str, list[dict[str, object]]] = {"cached": [], "whole": []}
    for k in range(args.repeats + 1):
        for arm in ("cached", "whole"):
            cache = PrefixCache(1 << 30) if arm == "cached" else None
            out = run_arm(model, tok, prompts, args, cache)
            if k:
                runs[arm].append(out)
    same = all(c["answers"] == w["answers"] for c, w in zip(runs["cached"], runs["whole"]))
    med = {arm: {key: statistics.median(float(r[key]) for r in rows) for key in ("first_s", "second_s")}
           for arm, rows in runs.items()}  # fmt: skip
    for arm, rows in runs.items():
        prompt_tokens, found = int(rows[0]["second_prompt_tokens"]), int(rows[0]["found_tokens"])
        emit(BENCH, {"figure": "arm", "arm": arm, "model": args.model, "episodes": len(prompts), "tokens": args.tokens,
                     "threads": args.threads, "repeats": args.repeats, **med[arm],
                     "second_prompt_tokens": prompt_tokens, "second_prefilled": prompt_tokens - found})  # fmt: skip
    both = {arm: med[arm]["first_s"] + med[arm]["second_s"] for arm in med}
    emit(BENCH, {"figure": "ratio", "model": args.model, "episodes": len(prompts), "same_tokens": same,
                 "second_s_cached_over_whole": round(med["cached"]["second_s"] / med["whole"]["second_s"], 3),
                 "both_s_cached_over_whole": round(both["cached"] / both["whole"], 3)})  # fmt: skip


if __name__ == "__main__":
    main()

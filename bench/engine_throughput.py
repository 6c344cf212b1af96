"""The embedded engine's decoding throughput at 1, 16, 64 and 256 concurrent requests, against transformers' own
batched `generate` on the same model, batch and device, and against the memory-bandwidth bound, in one run.

    python -m bench.engine_throughput [--model builtin:small | qwen2.5-0.5b-shape] [--tokens 64] [--repeats 3]
                                      [--device cpu|cuda] [--dtype float32|bfloat16] [--concurrency 1 16 64 256]
                                      [--prompts same distinct]

The engine side is the engine's own batcher (`embedded.batcher.Batcher`, its default `MAX_BATCH` and gathering
window): `--concurrency` requests submitted at once from an event loop, each `--tokens` new tokens at temperature 1
(`min_tokens` = `max_tokens`, so every row decodes every step, as in `generate` with `min_new_tokens`). The
`generate` side samples the same batch in one call (TRL's GRPOTrainer samples this way). Each figure is the median of
`--repeats` runs after an untimed one. `--prompts`: `same`, every request the one prompt (a GRPO group's first turn:
the engine prefills it once, `generate` once per row); `distinct`, each request its own prompt of the same length
(nothing shared). Rows per prompt kind and concurrency: tokens/s of each side and their ratio; then the
bandwidth bound: weights bytes x decoding steps per second / the device's memory bandwidth (measured here by a large
copy), how much of the memory traffic a decoding step must make the engine achieves; then where one batch's time
goes, the batch run directly (no batcher): its prefill, its decoding steps, and the share of the steps spent
sampling and handing tokens on (`Decoding._sample_live`) rather than in the model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Callable

from ajet_core.runtime import apply_offline_env
from bench.results import emit
from scripts.stamp import machine

apply_offline_env()

import torch  # noqa: E402
from transformers import PreTrainedModel  # noqa: E402

from ajet_trainer.embedded.batcher import Batcher, Pending  # noqa: E402
from ajet_trainer.embedded.generation import Decoding  # noqa: E402
from ajet_trainer.embedded.server import BATCH_WINDOW_S, MAX_BATCH, eos_token_ids  # noqa: E402
from ajet_trainer.embedded.types import GenRequest  # noqa: E402
from ajet_trainer.types import Tokenizer  # noqa: E402
from scripts.proxy_share import load  # noqa: E402

BENCH = "engine_throughput"


def timed(fn: Callable[[], object], repeats: int) -> float:
    """The median seconds of `repeats` runs of `fn`, after an untimed one."""
    fn()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def prompts_of(prompt: list[int], n: int, kind: str) -> list[list[int]]:
    """`n` prompts: `prompt` each time (`same`), or `prompt` with its first token varied per row (`distinct`: rows
    of the same length, none alike)."""
    if kind == "same":
        return [list(prompt)] * n
    return [[(prompt[0] + i) % 100 + 1, *prompt[1:]] for i in range(n)]


def engine_run(batcher: Batcher, prompts: list[list[int]], tokens: int) -> None:
    """The requests submitted at once to the engine's batcher, waited for."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        pending = [Pending(GenRequest(list(p), tokens, min_tokens=tokens), loop, loop.create_future(),
                           loop.create_future()) for p in prompts]  # fmt: skip
        for p in pending:
            batcher.submit(p)
        await asyncio.gather(*(p.done for p in pending))

    asyncio.run(run())


def generate_run(model: PreTrainedModel, pad_id: int, prompts: list[list[int]], tokens: int, ends: set[int]) -> None:
    """The same batch through transformers' `generate`."""
    ids = torch.tensor(prompts, device=model.device)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                       max_new_tokens=tokens, min_new_tokens=tokens, eos_token_id=sorted(ends),
                       pad_token_id=pad_id)  # fmt: skip


def bandwidth(device: str) -> float:
    """The device's memory bandwidth in bytes/s, measured: a 256 MiB copy reads and writes its bytes once each."""
    x = torch.empty(64 * 2**20, dtype=torch.float32, device=device)
    y = torch.empty_like(x)

    def copy() -> None:
        y.copy_(x)
        if device == "cuda":
            torch.cuda.synchronize()

    return 2 * x.numel() * x.element_size() / timed(copy, 5)


def one_concurrency(
    batcher: Batcher, model: PreTrainedModel, pad_id: int, prompts: list[list[int]], kind: str,
    args: argparse.Namespace, ends: set[int], bytes_per_s: float,
) -> None:  # fmt: skip
    """The rows of one concurrency: each side's tokens/s, their ratio, the engine's share of the bandwidth bound."""
    n = len(prompts)
    engine_s = timed(lambda: engine_run(batcher, prompts, args.tokens), args.repeats)
    generate_s = timed(lambda: generate_run(model, pad_id, prompts, args.tokens, ends), args.repeats)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else machine()
    base = {"model": args.model, "device": args.device, "device_name": name, "torch": torch.__version__,
            "dtype": args.dtype, "concurrency": n, "tokens": args.tokens, "prompts": kind}  # fmt: skip
    for side, seconds in (("engine", engine_s), ("generate", generate_s)):
        emit(BENCH, {**base, "side": side, "seconds": round(seconds, 4),
                     "tokens_per_s": round(n * args.tokens / seconds, 1)})  # fmt: skip
    steps_per_s = args.tokens * -(-n // MAX_BATCH) / engine_s  # the engine runs ceil(n / MAX_BATCH) batches
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    emit(BENCH, {**base, "figure": "compare", "engine_over_generate": round(generate_s / engine_s, 3),
                 "bandwidth_share": round(weights * steps_per_s / bytes_per_s, 4),
                 "bandwidth_gb_s": round(bytes_per_s / 1e9, 1), "weights_mb": round(weights / 2**20, 1)})  # fmt: skip
    profile(model, batcher.tokenizer, prompts, args.tokens, ends)  # warm
    emit(BENCH, {**base, **profile(model, batcher.tokenizer, prompts, args.tokens, ends)})


class TimedDecoding(Decoding):
    """A batch that adds up the seconds it spends sampling and handing tokens on (`_sample_live`)."""

    sampling_s = 0.0

    def _sample_live(self) -> torch.Tensor:
        t0 = time.perf_counter()
        out = super()._sample_live()
        self.sampling_s += time.perf_counter() - t0
        return out


def profile(model: PreTrainedModel, tok: Tokenizer, prompts: list[list[int]], tokens: int, ends: set[int]) -> dict:
    """One batch run directly: seconds of its prefill and of its steps, and the steps' share spent sampling."""
    t0 = time.perf_counter()
    run = TimedDecoding(model, tok, [GenRequest(list(p), tokens, min_tokens=tokens) for p in prompts], ends, 0)
    t1 = time.perf_counter()
    while not run.finished():
        run.step()
    steps_s = time.perf_counter() - t1
    share = run.sampling_s / steps_s
    return {"figure": "profile", "prefill_s": round(t1 - t0, 4), "steps_s": round(steps_s, 4),
            "per_step_ms": round(1000 * steps_s / tokens, 3), "sampling_share": round(share, 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:small")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    ap.add_argument("--prompts", nargs="+", choices=["same", "distinct"], default=["same", "distinct"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load(args.model, args.device)  # `qwen2.5-0.5b-shape`: random weights of that shape, no download
    model = model.to(getattr(torch, args.dtype))
    prompt = list(tok.apply_chat_template([{"role": "user", "content": "Say the letter: a"}],
                                          add_generation_prompt=True, tokenize=True)["input_ids"])  # fmt: skip
    ends = eos_token_ids(model, tok)
    batcher = Batcher(model, tok, ends, MAX_BATCH, BATCH_WINDOW_S, 0)
    batcher.start()
    bytes_per_s = bandwidth(args.device)
    try:
        for kind in args.prompts:
            for n in args.concurrency:
                one_concurrency(batcher, model, int(tok.pad_token_id), prompts_of(prompt, n, kind), kind, args, ends,
                                bytes_per_s)  # fmt: skip
    finally:
        batcher.stop()
        batcher.join(60)  # a worker torn down mid-step at exit aborts the interpreter


if __name__ == "__main__":
    main()

"""Run the embedded engine and one GRPO step on a GPU (or `--device cpu`), and print timings as JSON.

CI has no GPU; this is the check for the CUDA path of the embedded engine and trainer:

    python scripts/gpu_check.py --device cuda [--model builtin:small | /path/to/hf-model] [--lora-rank 8]

It starts the engine, sends `--requests` concurrent chat requests (micro-batched), checks that the
engine's logprobs match the trainer's recomputation (bf16 on CUDA: the gap is bf16's), runs GRPO updates on the
answers, checks that the new weights are served with the next policy version, and prints one JSON line per figure:
per step the update's time (the embedded engine shares the trainer's weights, so the update is the weight update),
the trainer's tokens/s and its model FLOPs utilization, 6 x parameters x tokens / update time, over the rate a large
matmul of the policy's dtype reaches on this device (measured here, `matmul_tflops`) and, on a GPU whose dense bf16
peak the table below holds, over that nominal peak too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ajet_core.runtime import apply_offline_env  # noqa: E402

apply_offline_env()

import httpx  # noqa: E402
import torch  # noqa: E402

from ajet.job import AgentJetJob  # noqa: E402
from ajet_trainer.embedded.learner import Learner  # noqa: E402
from ajet_trainer.embedded.server import EmbeddedEngine  # noqa: E402
from ajet_trainer.policy import load_policy  # noqa: E402
from ajet_trainer.tiny_model import resolve_model_path  # noqa: E402
from ajet_trainer.types import EpisodeSample, TrainSequence  # noqa: E402
from scripts.proxy_share import stamp  # noqa: E402

NOMINAL_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}
"""Dense bf16 peaks from the makers' sheets (SXM parts), by a word of `torch.cuda.get_device_name()`."""


def matmul_tflops(device: str, dtype: torch.dtype) -> float:
    """The rate a square matmul reaches here, in TFLOP/s (the best of 5 after a warm-up)."""
    n = 4096 if device.startswith("cuda") else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(6):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e12


def utilization(params: int, tokens: int, seconds: float, device: str, measured: float) -> dict[str, float]:
    """The update's tokens/s and model FLOPs utilization (6N per token), over the measured matmul rate and, where
    known, the device's nominal bf16 peak."""
    achieved = 6 * params * tokens / seconds / 1e12
    out = {"trainer_tokens_per_s": round(tokens / seconds, 1), "model_tflops": round(achieved, 4),
           "mfu_of_measured_matmul": round(achieved / measured, 4)}  # fmt: skip
    name = torch.cuda.get_device_name() if device.startswith("cuda") else ""
    peak = next((v for k, v in NOMINAL_BF16_TFLOPS.items() if k in name), None)
    if peak is not None:
        out["mfu_of_nominal_bf16_peak"] = round(achieved / peak, 4)
    return out


async def _ask(url: str, n: int, max_tokens: int) -> list[dict]:
    async with httpx.AsyncClient(timeout=600) as c:
        rs = await asyncio.gather(
            *(
                c.post(
                    url + "/chat/completions",
                    json={
                        "messages": [{"role": "user", "content": f"Say the letter: {'abcdefgh'[i % 8]}"}],
                        "max_tokens": max_tokens,
                        "seed": i,
                        "return_token_ids": True,
                        "logprobs": True,
                    },
                )
                for i in range(n)
            )
        )
    return [r.json() for r in rs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="builtin:small")
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device visible")
    job = AgentJetJob(
        model=args.model,
        lora_rank=args.lora_rank,
        lr=1e-4 if args.lora_rank == 0 else 1e-3,
        max_prompt_length=256,
        max_response_length=256,
        max_model_len=1024,
    )
    model, tok = load_policy(str(resolve_model_path(args.model)), job, args.device)
    learner = Learner(model, tok, job)
    engine = EmbeddedEngine(model, tok, max_tokens_cap=args.max_tokens)
    url = engine.start()
    stamped = stamp(args.device)  # each row carries the commit, date, machine, torch and device, written here
    emit = lambda **kw: print(json.dumps({"device": args.device, "model": args.model, **kw, **stamped}), flush=True)  # noqa: E731
    dtype = next(model.parameters()).dtype
    measured = matmul_tflops(args.device, dtype)
    params = sum(p.numel() for p in model.parameters())
    emit(dtype=str(dtype).removeprefix("torch."), params=params, matmul_tflops=round(measured, 3))
    try:
        for step in range(args.steps):
            t0 = time.perf_counter()
            answers = asyncio.run(_ask(url, args.requests, args.max_tokens))
            gen_s = time.perf_counter() - t0
            tokens = sum(len(a["choices"][0]["token_ids"]) for a in answers)
            versions = {a["policy_version"] for a in answers}
            samples = []
            for i, a in enumerate(answers):
                ch = a["choices"][0]
                text = ch["message"]["content"] or ""
                reward = 1.0 if text[:1] == "abcdefgh"[i % 8] else float(len(text) % 2)
                seq = TrainSequence(
                    f"e{i}",
                    f"t{i % 8}",
                    tuple(a["prompt_token_ids"]),
                    tuple(ch["token_ids"]),
                    (1,) * len(ch["token_ids"]),
                    tuple(c["logprob"] for c in ch["logprobs"]["content"]),
                )
                samples.append(EpisodeSample(f"e{i}", f"t{i % 8}", reward, (seq,)))
            with engine.batcher.paused(engine.batcher.policy_version + 1):
                metrics = learner.update(samples)
            trained = sum(len(s.prompt_ids) + len(s.response_ids) for e in samples for s in e.sequences)
            emit(
                step=step,
                requests=args.requests,
                generate_s=round(gen_s, 3),
                tokens_per_s=round(tokens / gen_s, 1),
                max_batch_seen=engine.batcher.stats["max_batch_seen"],
                served_versions=sorted(versions),
                update_s=round(metrics["update_s"], 3),
                **utilization(params, trained, metrics["update_s"], args.device, measured),
                logprob_gap=metrics["logprob_gap"],
                reward_mean=metrics["reward_mean"],
                loss=metrics["loss"],
            )
        assert versions == {args.steps - 1}, "the last batch must be served by the newest weights"
        if args.device.startswith("cuda"):
            emit(max_memory_gb=round(torch.cuda.max_memory_allocated() / 2**30, 2))
    finally:
        engine.stop()


if __name__ == "__main__":
    main()

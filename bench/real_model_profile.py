"""One step of the tool tutorial on SmolLM2-135M-Instruct, split into its parts, each against its bound.

The tutorial (tutorial/example_tool_agent: 4 questions a step, 4 episodes each, two calls an episode of at most 48
tokens) trains on a fresh `ajet-swarm start` with the embedded engine, once per `--grammar` backend. Each step's
metrics say where its time went (`ajet_trainer.types.PhaseTimes`, the step's timers); each part is set against the
least time this machine could take for it, from its FLOPs at the matmul rate and its bytes at the memory bandwidth,
both measured here first at the step's own shapes and the trainer's threads:
- prefill: the prompt tokens the engine ran (after those its prefix cache held) x 2 FLOPs a weight;
- decode: each one-token forward reads every weight once (bytes at the bandwidth), or its rows' FLOPs, the larger;
- constrained decoding: one vocabulary-wide mask written and read per drawn token;
- drawing tokens: the log-softmax over the vocabulary (read, written, read again) per drawn token;
- HTTP, proxy and the agent: the rollout's seconds the engine spent not sampling; no bound (it computes nothing the
  step needs), so the figure is its seconds;
- update: the tokens its passes ran x 4 FLOPs a weight (LoRA: forward and the backward through the frozen weights),
  the optimizer and publishing left out.
The first step is left out of the means (imports, the grammar compiler's first build, the allocator's first pages).
One row per (backend, step) and one per backend (the means of the later steps).

Usage: python -m bench.real_model_profile [--steps 4] [--grammar xgrammar outlines-core] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ajet_core.runtime import apply_offline_env
from ajet_swarm.launch import launched_swarm
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from bench.real_model import clients, mean_known
from bench.results import emit

apply_offline_env()

from ajet import AgentJetJob  # noqa: E402
from tutorial.example_tool_agent import agent_roll  # noqa: E402
from tutorial.example_tool_agent.agent_roll import RunReport  # noqa: E402

BENCH = "real_model_profile"
PARTS = ("prefill", "decode", "constrain", "sample", "http_proxy_agent", "update")


def timed_rate(run: Callable[[], None], work: float, seconds: float = 1.0) -> float:
    """`work` units a second of `run`, over at least `seconds` after one warm-up call."""
    run()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or n < 3:
        run()
        n += 1
    return work * n / (time.perf_counter() - t0)


def matmul_rate(rows: int, hidden: int, wide: int) -> float:
    """fp32 FLOP/s of a (rows x hidden) by (hidden x wide) product: a projection of the model at `rows` tokens."""
    a, b = torch.randn(rows, hidden), torch.randn(hidden, wide)
    return timed_rate(lambda: torch.mm(a, b), 2.0 * rows * hidden * wide)


def bandwidth(mib: int = 256) -> float:
    """Bytes a second copied from one tensor to another (each byte read once and written once)."""
    a = torch.ones(mib << 18)  # fp32: 4 bytes each
    b = torch.empty_like(a)
    return timed_rate(lambda: b.copy_(a), 2.0 * a.numel() * 4)


def machine(model_path: str, threads: int) -> dict[str, float]:
    """The model's matmul weights and vocabulary, and this machine's rates at the step's shapes."""
    torch.set_num_threads(threads)
    model, _ = load_policy(model_path, AgentJetJob(), "cpu")
    linear = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    weights = sum(w.numel() for w in linear)
    hidden, wide = model.config.hidden_size, model.config.intermediate_size
    out = {"matmul_weights": float(weights), "weight_bytes": float(sum(w.numel() * w.element_size() for w in linear)),
           "vocab": float(model.config.vocab_size), "threads": float(threads)}  # fmt: skip
    del model
    out.update(prefill_flops_s=matmul_rate(256, hidden, wide), decode_flops_s=matmul_rate(16, hidden, wide),
               update_flops_s=matmul_rate(1024, hidden, wide), bandwidth_bytes_s=bandwidth())  # fmt: skip
    return out


def bounds(m: dict[str, float], hw: dict[str, float]) -> dict[str, float]:
    """Each part's least seconds on this machine for what the step's metrics `m` say it computed."""
    n, v, bw = hw["matmul_weights"], hw["vocab"], hw["bandwidth_bytes_s"]
    drawn = m.get("engine/decode_tokens", 0.0) + m.get("partial/generated_answers", 0.0)  # a draw ends each answer
    return {
        "prefill": m.get("engine/prefill_tokens", 0.0) * 2 * n / hw["prefill_flops_s"],
        "decode": max(m.get("engine/decode_steps", 0.0) * hw["weight_bytes"] / bw,
                      m.get("engine/decode_tokens", 0.0) * 2 * n / hw["decode_flops_s"]),
        "constrain": drawn * v * 4 * 2 / bw,
        "sample": drawn * v * 4 * 3 / bw,
        "http_proxy_agent": 0.0,
        "update": m.get("update_tokens", 0.0) * 4 * n / hw["update_flops_s"],
    }  # fmt: skip


def measured(m: dict[str, float]) -> dict[str, float]:
    """Each part's seconds in the step's metrics `m`."""
    engine = {p: m.get(f"engine/{p}_s", 0.0) for p in ("prefill", "decode", "constrain", "sample")}
    rollout = m.get("wait_s", 0.0) + m.get("drain_s", 0.0)
    return {**engine, "http_proxy_agent": max(0.0, rollout - sum(engine.values())), "update": m.get("train_s", 0.0)}


def profile_row(m: dict[str, float], hw: dict[str, float]) -> dict[str, Any]:
    """One step's parts: seconds, bound and their ratio, and what the step ran."""
    took, least = measured(m), bounds(m, hw)
    parts = {p: {"s": round(took[p], 3), "bound_s": round(least[p], 3),
                 "over_bound": round(took[p] / least[p], 2) if least[p] > 0 else None} for p in PARTS}  # fmt: skip
    counts = ("engine/prefill_tokens", "engine/decode_steps", "engine/decode_tokens", "engine/cached_prompt_tokens",
              "partial/generated_answers", "update_tokens", "trained_tokens")  # fmt: skip
    return {"parts": parts, "step_s": round(m.get("step_s", 0.0), 2), **{k: m.get(k) for k in counts}}


async def steps_of(url: str, roll_args: argparse.Namespace) -> list[dict[str, float]]:
    """The tutorial's training for `roll_args.max_steps` steps on the swarm at `url`; each step's metrics."""
    report = RunReport()
    async with clients(url) as (client, base):
        await client.auto_sync_train_config_and_start_engine(agent_roll.make_job(roll_args), force_restart=True)
        await agent_roll.train(client, base, roll_args, report)
        steps = [s.metrics for s in await client.get_steps()]
        await client.stop_engine()
    return steps


def run_backend(grammar: str, args: argparse.Namespace, hw: dict[str, float], root: Path) -> None:
    """A fresh swarm whose engine constrains with `grammar`; a row per step and a row of the later steps' means."""
    roll_args = agent_roll.parser().parse_args(
        ["--max-steps", str(args.steps), "--minutes", "60", "--seed", str(args.seed), "--experiment", f"prof-{grammar}"]
    )  # fmt: skip
    swarm_args = ("--threads", str(args.threads), "--grammar-backend", grammar)
    with launched_swarm(root / grammar, *swarm_args, timeout=900) as url:
        roll_args.swarm_url = url
        steps = asyncio.run(steps_of(url, roll_args))
    rows = [profile_row(m, hw) for m in steps]
    for i, row in enumerate(rows, start=1):
        emit(BENCH, {"figure": "step", "grammar": grammar, "step": i, "seed": args.seed, **row, "machine_rates": hw})
    later = rows[1:] or rows
    mean = {p: {k: _mean([r["parts"][p][k] for r in later]) for k in ("s", "bound_s", "over_bound")} for p in PARTS}
    emit(BENCH, {"figure": "mean", "grammar": grammar, "steps": len(later), "seed": args.seed, "parts": mean,
                 "step_s": _mean([r["step_s"] for r in later]), "machine_rates": hw})  # fmt: skip


def _mean(values: list[Any]) -> Optional[float]:
    """`mean_known` to the rows' three decimals."""
    mean = mean_known(values)
    return None if mean is None else round(mean, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="steps of the tutorial a backend trains (the first left out)")
    ap.add_argument("--grammar", nargs="+", default=["xgrammar", "outlines-core"])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the trainer's torch threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    hw = machine(str(builtin_model_path(agent_roll.MODEL)), args.threads)
    print({k: f"{v:.4g}" for k, v in hw.items()}, flush=True)
    root = Path(tempfile.mkdtemp(prefix="ajet-profile-"))
    for grammar in args.grammar:
        run_backend(grammar, args, hw, root)


if __name__ == "__main__":
    main()

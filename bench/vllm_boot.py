"""How long vLLM's CPU build takes to answer its first call from launch, with its worker in a process of its own (the
CPU build's default executor, `mp`) against the worker in the engine core's process (`uni`, what the trainer sets on
a CPU, as vLLM runs one GPU). Every vLLM test of the suite pays this boot.

The arms alternate, `--repeats` boots each, on the tiny built-in model with the trainer's CPU flags. Rows: one per
boot (seconds to health, the first answer's text), and one comparing the arms' medians (`uni` over `mp`) and
whether both arms answered the same text greedily.

Usage: python -m bench.vllm_boot [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from ajet_core.runtime import apply_offline_env
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.vllm.server import VllmServer, VllmSettings, find_vllm_python
from bench.results import emit

BENCH = "vllm_boot"
ARMS = {"mp": ("--distributed-executor-backend", "mp"), "uni": ()}
"""The trainer's flags set `uni` on a CPU; the `mp` arm overrides it back to the CPU build's default."""


def boot(arm: str, tmp: Path) -> tuple[float, str]:
    """Seconds from launch to a healthy server, and its greedy answer to one prompt."""
    settings = VllmSettings(python=find_vllm_python(), lora_rank=8, max_model_len=512, cpu=True, user_args=ARMS[arm])
    engine = VllmServer(str(builtin_model_path("builtin:tiny")), settings, tmp / f"vllm-{arm}.log")
    t0 = time.monotonic()
    engine.start()
    seconds = time.monotonic() - t0
    try:
        body = {"model": engine.served_model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                "temperature": 0}  # fmt: skip
        answer = httpx.post(engine.base_url + "/chat/completions", json=body, timeout=120).json()
        return seconds, answer["choices"][0]["message"]["content"]
    finally:
        engine.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    apply_offline_env()
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    texts: dict[str, set[str]] = {arm: set() for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="vllm-boot-") as tmp:
        for repeat in range(args.repeats):
            for arm in ARMS:
                s, text = boot(arm, Path(tmp))
                seconds[arm].append(s)
                texts[arm].add(text)
                emit(BENCH, {"figure": "boot", "arm": arm, "repeat": repeat, "seconds": round(s, 2), "text": text})
    med = {arm: statistics.median(v) for arm, v in seconds.items()}
    emit(BENCH, {"figure": "compare", "repeats": args.repeats, "mp_median_s": round(med["mp"], 2),
                 "uni_median_s": round(med["uni"], 2), "uni_over_mp": round(med["uni"] / med["mp"], 3),
                 "same_answer": texts["mp"] == texts["uni"] and len(texts["mp"]) == 1})  # fmt: skip


if __name__ == "__main__":
    main()

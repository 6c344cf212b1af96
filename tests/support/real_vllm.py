"""Real vLLM (the CPU build in `.venv-vllm`, `make setup-vllm`) for the `vllm_real` tests.

`make test` sets `AJET_REQUIRE_VLLM=1`: there a missing vLLM fails the tests instead of skipping them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.vllm.server import VllmServer, VllmSettings, find_vllm_python
from tests.support.require import need

if TYPE_CHECKING:
    import torch


def vllm_python() -> str:
    """The interpreter with vLLM; skips (or fails under `AJET_REQUIRE_VLLM=1`) when there is none."""
    python = find_vllm_python()
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u; raise SystemExit(u.find_spec('vllm') is None)"], capture_output=True
    )
    need(probe.returncode == 0, f"no vLLM in {python}: run `make setup-vllm`", "AJET_REQUIRE_VLLM")
    return python


def tiny_path() -> str:
    return str(builtin_model_path("builtin:tiny"))


def start_vllm(
    tmp: Path,
    model_path: Optional[str] = None,
    lora_rank: int = 8,
    user_args: tuple[str, ...] = (),
    timeout_s: float = 600,
    max_model_len: int = 512,
    max_tokens_cap: Optional[int] = None,
) -> VllmServer:
    """vLLM's server on the tiny model, launched as the trainer launches it (CPU settings; `max_tokens_cap`: the
    job's per-turn cap, as the trainer sets it)."""
    settings = VllmSettings(
        python=vllm_python(),
        lora_rank=lora_rank,
        max_model_len=max_model_len,
        max_tokens_cap=max_tokens_cap,
        cpu=True,
        health_timeout_s=timeout_s,
        user_args=user_args,
    )
    engine = VllmServer(model_path or tiny_path(), settings, tmp / "vllm.log")
    engine.start()
    return engine


def random_adapter(base: str | Path, tmp: Path, seed: int) -> Path:
    """A peft adapter (rank 8, every linear layer) of the model at `base` with non-zero weights, a trained one's
    shape, saved under `tmp/adapter_<seed>`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    peft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False),
    )
    path = tmp / f"adapter_{seed}"
    peft.save_pretrained(str(path))
    return path


def adapter_model(base: str | Path, adapter: Path) -> "torch.nn.Module":
    """The model at `base` with the peft adapter saved at `adapter`, in eval mode: what vLLM serving it computes."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(adapter)).eval()

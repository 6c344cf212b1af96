"""Loading the policy: the model and tokenizer a session trains and its engines serve, on the device it runs on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ajet.job import AgentJetJob
from ajet_trainer.progress import configure_hf_progress
from ajet_trainer.types import PolicyModel, Tokenizer

if TYPE_CHECKING:
    from peft import LoraConfig


def pick_device(device: str) -> str:
    """`auto` -> `cuda` when available, else `cpu`."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def lora_config(job: AgentJetJob) -> "LoraConfig":
    """The peft configuration of the job's LoRA adapter."""
    from peft import LoraConfig

    return LoraConfig(
        r=job.lora_rank,
        lora_alpha=job.lora_alpha,
        target_modules=job.lora_target_modules,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )


def load_policy(
    model_path: str, job: AgentJetJob, device: str, adapter: str = "default"
) -> tuple[PolicyModel, Tokenizer]:
    """Model and tokenizer from a local folder; LoRA-wrapped when `job.uses_lora` (the adapter named `adapter`)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from ajet_trainer.vision_folder import is_vision_folder

    configure_hf_progress()  # transformers' loading bar at a terminal, none in logs

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    loader = AutoModelForImageTextToText if is_vision_folder(Path(model_path)) else AutoModelForCausalLM
    model = loader.from_pretrained(model_path, dtype=dtype).to(device)
    if job.uses_lora:
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(job), adapter_name=adapter)
    model.eval()  # dropout off for generation and for the (deterministic) training forward passes
    return model, tokenizer

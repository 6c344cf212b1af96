"""Checkpoints in the experiment folder: weights (adapter or full, safetensors), optimizer, step.

Layout: `<experiment>/checkpoints/step_<N>/` with `model.safetensors` (or `adapter.safetensors`),
`optimizer.pt` and `state.json`; `<experiment>/checkpoints/latest` names the newest complete one.
A checkpoint is written into a temporary folder and renamed, then `latest` is replaced atomically,
so a crash at any point leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, save_file

from ajet_trainer.errors import CheckpointError
from ajet_trainer.types import PolicyModel


def _weights(model: PolicyModel, lora: bool) -> dict[str, torch.Tensor]:
    if lora:
        from peft import get_peft_model_state_dict

        sd = get_peft_model_state_dict(model)
    else:
        sd = model.state_dict()
    return {k: v.detach().contiguous().cpu() for k, v in sd.items()}


def save_checkpoint(root: Path, step: int, model: PolicyModel, optimizer: torch.optim.Optimizer, lora: bool,
                    meta: dict[str, Any]) -> Path:
    """Write checkpoint `step`; returns its folder. The previous checkpoint stays valid until done."""
    ckpt_dir = root / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"step_{step}"
    tmp = ckpt_dir / f".step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    weights = _weights(model, lora)
    if not lora:  # tied embeddings share storage: save each tensor once
        weights = _dedupe(weights)
    save_file(weights, str(tmp / ("adapter.safetensors" if lora else "model.safetensors")))
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, "lora": lora, **meta}, indent=1))
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = ckpt_dir / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, ckpt_dir / "latest")
    _fsync_dir(ckpt_dir)
    return final


def latest_checkpoint(root: Path) -> Optional[Path]:
    """The newest complete checkpoint folder, or None."""
    pointer = root / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = root / "checkpoints" / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise CheckpointError(f"checkpoint pointer names a missing checkpoint: {path}")
    return path


def load_checkpoint(path: Path, model: PolicyModel, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights and optimizer from `path`; returns its state (step, policy version, ...)."""
    state = json.loads((path / "state.json").read_text())
    device = next(model.parameters()).device
    if state["lora"]:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(path / "adapter.safetensors"), device=str(device)))
    else:
        missing, unexpected = model.load_state_dict(load_file(str(path / "model.safetensors"), device=str(device)),
                                                    strict=False)
        real_missing = [k for k in missing if k not in _tied_names(model)]
        if real_missing or unexpected:
            raise CheckpointError(f"{path}: missing {real_missing[:5]}, unexpected {unexpected[:5]}")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    return state


def prune_checkpoints(root: Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints."""
    ckpts = sorted((p for p in (root / "checkpoints").glob("step_*") if p.is_dir()),
                   key=lambda p: int(p.name.split("_")[1]))
    for p in ckpts[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)


def _dedupe(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen: dict[int, str] = {}
    out = {}
    for k, v in weights.items():
        ptr = v.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen[ptr] = k
        out[k] = v
    return out


def _tied_names(model: PolicyModel) -> set[str]:
    sd = model.state_dict()
    by_ptr: dict[int, list[str]] = {}
    for k, v in sd.items():
        by_ptr.setdefault(v.untyped_storage().data_ptr(), []).append(k)
    return {k for names in by_ptr.values() if len(names) > 1 for k in names}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

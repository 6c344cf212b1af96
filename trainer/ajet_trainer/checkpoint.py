"""Checkpoints in the experiment folder, each a model folder other tools load, plus what resuming needs.

Layout: `<experiment>/checkpoints/step_<N>/` with
- `model/` (full fine-tuning): `save_pretrained` weights, config, generation config and tokenizer, a
  folder `AutoModelForCausalLM.from_pretrained` and vLLM load as they are;
- `adapter/` (LoRA): a peft adapter folder (`adapter_config.json`, `adapter_model.safetensors`) and the
  tokenizer; `PeftModel.from_pretrained(base, adapter)` loads it, vLLM serves it with `--enable-lora`;
- `optimizer.pt` and `state.json` (step, policy version, model, the step's pending record).
`<experiment>/checkpoints/latest` names the newest complete one. A checkpoint is written into a
temporary folder and renamed, then `latest` is replaced atomically, so a crash at any point leaves the
previous checkpoint intact. Checkpoints written before this layout (bare `model.safetensors` /
`adapter.safetensors`) still restore.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Collection, Optional, Sequence

import torch
from safetensors.torch import load_file

from ajet.evaluation_types import EvaluationInfo
from ajet_trainer.errors import CheckpointError
from ajet_trainer.types import PolicyModel, Tokenizer

MODEL_DIR = "model"
"""Sub-folder of a full fine-tuning checkpoint: a Hugging Face model folder."""
ADAPTER_DIR = "adapter"
"""Sub-folder of a LoRA checkpoint: a peft adapter folder."""


def save_checkpoint(
    root: Path,
    step: int,
    model: PolicyModel,
    tokenizer: Tokenizer,
    optimizer: torch.optim.Optimizer,
    lora: bool,
    meta: dict[str, Any],
    adapter: Optional[str] = None,
) -> Path:
    """Write checkpoint `step`; returns its folder. The previous checkpoint stays valid until done. `adapter`: the
    one LoRA adapter saved, of several on the model (a shared base), in the same layout as a model's only one."""
    ckpt_dir = root / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = ckpt_dir / f"step_{step}"
    tmp = ckpt_dir / f".step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    folder = tmp / (ADAPTER_DIR if lora else MODEL_DIR)
    if adapter is None:
        model.save_pretrained(str(folder), safe_serialization=True)  # tied embeddings are saved once
    else:
        _save_adapter(model, adapter, folder)
    tokenizer.save_pretrained(str(folder))
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


def _save_adapter(model: PolicyModel, adapter: str, folder: Path) -> None:
    """peft's adapter folder of `adapter` alone (peft writes an adapter not named `default` one folder down)."""
    model.save_pretrained(str(folder), safe_serialization=True, selected_adapters=[adapter])
    below = folder / adapter
    if adapter != "default" and below.is_dir():
        for item in below.iterdir():
            os.replace(item, folder / item.name)
        below.rmdir()


def latest_checkpoint(root: Path) -> Optional[Path]:
    """The newest complete checkpoint folder, or None."""
    pointer = root / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = root / "checkpoints" / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise CheckpointError(f"checkpoint pointer names a missing checkpoint: {path}")
    return path


def checkpoint_at(root: Path, step: Optional[int] = None) -> Path:
    """Checkpoint `step` of an experiment (the newest when None); `CheckpointError` if there is none."""
    if step is None:
        path = latest_checkpoint(root)
        if path is None:
            raise CheckpointError(f"{root}: no checkpoint (is it an experiment folder?)")
        return path
    path = root / "checkpoints" / f"step_{step}"
    if not (path / "state.json").is_file():
        have = sorted(p.name for p in (root / "checkpoints").glob("step_*"))
        raise CheckpointError(f"{root}: no checkpoint of step {step} (have: {', '.join(have) or 'none'})")
    return path


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's `state.json`."""
    state: dict[str, Any] = json.loads((path / "state.json").read_text())
    return state


def load_checkpoint(
    path: Path, model: PolicyModel, optimizer: torch.optim.Optimizer, adapter: Optional[str] = None
) -> dict[str, Any]:
    """Restore weights and optimizer from `path` (a LoRA checkpoint into `adapter`, peft's `default` when None);
    returns its state (step, policy version, ...)."""
    state = read_state(path)
    device = str(next(model.parameters()).device)
    if state["lora"]:
        from peft import set_peft_model_state_dict

        legacy = path / "adapter.safetensors"
        weights = load_file(
            str(legacy if legacy.is_file() else path / ADAPTER_DIR / "adapter_model.safetensors"), device=device
        )
        set_peft_model_state_dict(model, weights, adapter_name=adapter or "default")
    else:
        missing, unexpected = model.load_state_dict(_model_weights(path, device), strict=False)
        real_missing = [k for k in missing if k not in tied_names(model)]
        if real_missing or unexpected:
            raise CheckpointError(f"{path}: missing {real_missing[:5]}, unexpected {unexpected[:5]}")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=device, weights_only=True))
    return state


def _model_weights(path: Path, device: str) -> dict[str, torch.Tensor]:
    """Every tensor of a full checkpoint (one file, or the shards `save_pretrained` writes for big models)."""
    legacy = path / "model.safetensors"
    files = [legacy] if legacy.is_file() else sorted((path / MODEL_DIR).glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no model weights")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f), device=device))
    return weights


def prune_checkpoints(root: Path, keep: int, protect: Collection[int] = ()) -> None:
    """Delete all but the newest `keep` checkpoints and those of the steps in `protect`."""
    prune_step_folders(root / "checkpoints", keep, protect)


def checkpoint_steps(root: Path) -> set[int]:
    """The steps of the checkpoints on disk."""
    return {int(p.name[5:]) for p in (root / "checkpoints").glob("step_*") if p.is_dir() and p.name[5:].isdigit()}


def prune_step_folders(parent: Path, keep: int, protect: Collection[int] = ()) -> None:
    """Delete all but the newest `keep` `step_<N>` folders under `parent` (none when `keep` <= 0), and those of the
    steps in `protect`."""
    steps = sorted(
        (p for p in parent.glob("step_*") if p.is_dir() and p.name[5:].isdigit()), key=lambda p: int(p.name[5:])
    )
    for p in steps[:-keep] if keep > 0 else []:
        if int(p.name[5:]) not in protect:
            shutil.rmtree(p, ignore_errors=True)


def evaluated_steps(evaluations: Sequence[EvaluationInfo], per_set: int) -> set[int]:
    """The policy versions (the steps whose checkpoints hold them) of the `per_set` best evaluations of each task
    set, among those one version served (`ajet.evaluation_types.best_of`'s order)."""
    best: dict[str, list[EvaluationInfo]] = {}
    for e in evaluations:
        if e.version_min == e.version_max:
            best.setdefault(e.name, []).append(e)
    ranked = (sorted(es, key=lambda e: (e.pass_at_k, e.mean_reward, e.id), reverse=True) for es in best.values())
    return {e.version_min for es in ranked for e in es[: max(per_set, 0)]}


def tied_names(model: PolicyModel) -> set[str]:
    """Names of the parameters that share their storage with another (tied embeddings)."""
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

"""`ajet-trainer export-model`: a checkpoint as a model folder that leaves the box.

Full fine-tuning checkpoints are Hugging Face model folders already; LoRA ones are peft adapter folders,
exported as they are or merged into their base model (`--merge-lora`) for tools that serve no adapters.
The folder is written next to `out` and renamed into place, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Callable, Optional, Sequence

from ajet.evaluation_types import EvaluationInfo, best_of
from ajet_trainer.checkpoint import ADAPTER_DIR, MODEL_DIR, checkpoint_at, read_state
from ajet_trainer.errors import CheckpointError
from ajet_trainer.progress import configure_hf_progress, copy_tree
from ajet_trainer.tiny_model import resolve_model_path

logger = logging.getLogger(__name__)


def export_model(exp_dir: Path, out: Path, step: Optional[int] = None, merge_lora: bool = False) -> Path:
    """Export checkpoint `step` (the newest when None) of `exp_dir` to the folder `out`; returns `out`.

    An experiment of the verl backend (verl's checkpoints, none of the embedded trainer's) is exported through
    verl's model merger (`verl_backend.export`), to the same kinds of folder."""
    if (exp_dir / "verl_checkpoints").is_dir() and not (exp_dir / "checkpoints").is_dir():
        return _export_verl(exp_dir, out, step, merge_lora)
    ckpt = checkpoint_at(exp_dir, step)
    state = read_state(ckpt)
    _refuse_nonempty(out)
    if not (ckpt / (ADAPTER_DIR if state["lora"] else MODEL_DIR)).is_dir():
        raise CheckpointError(f"{ckpt} was written before checkpoints were model folders: resume it once to re-save")

    def write(tmp: Path) -> None:
        if not state["lora"]:
            copy_tree(ckpt / MODEL_DIR, tmp, f"export step {state['step']}")
        elif merge_lora:
            merge_adapter(ckpt / ADAPTER_DIR, str(resolve_model_path(state["model"])), tmp)
        else:
            copy_tree(ckpt / ADAPTER_DIR, tmp, f"export step {state['step']} adapter")

    _write_into_place(out, write)
    logger.info("exported %s (step %d%s) to %s", ckpt, state["step"], ", LoRA merged" if merge_lora else "", out)
    return out


def best_evaluated(evaluations: Sequence[EvaluationInfo], saved: set[int], name: str) -> EvaluationInfo:
    """What `export-model --best NAME` exports: the best evaluation of task set `name` (`best_of`) among those whose
    policy version has a checkpoint in `saved` (warned when the best of all has none); `CheckpointError` saying why
    when there is none."""
    best = best_of(list(evaluations), name)
    if best is None:
        raise CheckpointError(f"no evaluation of {name!r} that one policy version served (ajet.evaluate)")
    kept = best_of([e for e in evaluations if e.version_min in saved], name)
    if kept is None:
        raise CheckpointError(
            f"no evaluated version of {name!r} has a checkpoint on disk (the best: version {best.version_min}, "
            f"pass@{best.k} {best.pass_at_k:.3f}): keep them with the trainer's keep_evaluated, save them with the "
            "job's save_freq"
        )
    if kept is not best:
        logger.warning("the best evaluation of %r (version %d, pass@%d %.3f) has no checkpoint on disk; exporting "
                       "version %d (pass@%d %.3f)", name, best.version_min, best.k, best.pass_at_k, kept.version_min,
                       kept.k, kept.pass_at_k)  # fmt: skip
    return kept


def _export_verl(exp_dir: Path, out: Path, step: Optional[int], merge_lora: bool) -> Path:
    from ajet.job import AgentJetJob
    from ajet_trainer.verl.checkpoint_export import export_verl

    _refuse_nonempty(out)
    base = str(resolve_model_path(AgentJetJob.from_yaml(str(exp_dir / "job.yaml")).model))

    def write(tmp: Path) -> None:
        if not merge_lora:
            export_verl(exp_dir, tmp, step, base)
            return
        adapter = tmp.parent / f"{tmp.name}.adapter"
        try:
            if export_verl(exp_dir, adapter, step, base):  # the adapter's base is the job's model
                merge_adapter(adapter, base, tmp)
            else:  # full fine-tuning: nothing to merge
                adapter.rename(tmp)
        finally:
            shutil.rmtree(adapter, ignore_errors=True)

    _write_into_place(out, write)
    logger.info("exported verl checkpoint of %s%s to %s", exp_dir, ", LoRA merged" if merge_lora else "", out)
    return out


def _refuse_nonempty(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"{out} exists and is not empty")


def _write_into_place(out: Path, write: Callable[[Path], None]) -> None:
    """`write` fills a new folder beside `out`, which is then renamed to `out`: a failure leaves nothing there."""
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def merge_adapter(adapter: Path, base_path: str, dest: Path) -> None:
    """The base model with the adapter merged in, saved as a plain model folder (with the tokenizer)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    configure_hf_progress()  # loading and writing bars at a terminal
    base = AutoModelForCausalLM.from_pretrained(base_path)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(dest), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(adapter)).save_pretrained(str(dest))

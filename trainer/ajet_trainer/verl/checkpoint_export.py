"""`ajet-trainer export-model` for experiments trained with `--backend verl`.

verl checkpoints hold the actor's FSDP shards (`verl_checkpoints/global_step_N/actor/`, one file per
rank) and its Hugging Face config and tokenizer (`huggingface/`). verl's own model merger
(`verl.model_merger`) gathers the shards into a Hugging Face model folder; with LoRA it writes the
base weights there and the adapter under `lora_adapter/`. verl's merger casts every weight to bf16
(verl/model_merger/fsdp_model_merger.py:187 and :199, base_model_merger.py:414); `FullPrecisionMerger`
keeps the checkpoint's dtype, so the export is the policy that was served, not a rounding of it. The
export then matches the embedded backend's: full fine-tuning -> the model folder; LoRA -> the peft
adapter folder (with the tokenizer and its base model's path; `ajet_trainer.model_export` merges it into the
base for `--merge-lora`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import torch

from ajet_trainer.errors import CheckpointError

VERL_DIR = "verl_checkpoints"
"""Where the verl backend's checkpoints lie in an experiment folder (`trainer.default_local_dir`)."""


def verl_checkpoint_at(exp_dir: Path, step: Optional[int] = None) -> Path:
    """The actor folder of verl checkpoint `step` (the newest when None); `CheckpointError` if there is none."""
    root = exp_dir / VERL_DIR
    if step is None:
        pointer = root / "latest_checkpointed_iteration.txt"
        if not pointer.is_file():
            raise CheckpointError(f"{exp_dir}: no checkpoint (is it an experiment folder?)")
        step = int(pointer.read_text().strip())
    actor = root / f"global_step_{step}" / "actor"
    if not (actor / "huggingface").is_dir():
        have = sorted(p.name for p in root.glob("global_step_*"))
        raise CheckpointError(f"{exp_dir}: no verl checkpoint of step {step} (have: {', '.join(have) or 'none'})")
    return actor


def _full_precision_merger() -> type:
    """verl's FSDP merger with the shards merged and saved in their own dtype (verl's casts them to bf16)."""
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger, merge_non_dtensor_shards

    class FullPrecisionMerger(FSDPModelMerger):
        def _load_and_merge_state_dicts(
            self, world_size: int, total_shards: int, mesh_shape: tuple[int, ...], mesh_dim_names: tuple[str, ...]
        ) -> dict[str, torch.Tensor]:
            if len(mesh_shape) != 1:
                raise CheckpointError("export-model: FSDP + tensor-parallel checkpoints are not supported")
            shards = [
                torch.load(
                    Path(self.config.local_dir) / f"model_world_size_{world_size}_rank_{rank}.pt",
                    map_location="cpu",
                    weights_only=False,
                )
                for rank in range(total_shards)
            ]
            merged = {}
            for key in shards[0]:
                parts = [shard[key] for shard in shards]
                if isinstance(parts[0], DTensor):
                    placements = tuple(parts[0].placements)
                    if mesh_dim_names[0] in ("dp", "ddp"):  # replicated over data parallel: one copy
                        placements = placements[1:]
                    merged[key] = self._merge_by_placement([p._local_tensor for p in parts], placements[0])
                else:
                    merged[key] = merge_non_dtensor_shards(key, parts)
            return merged

        def save_hf_model_and_tokenizer(self, state_dict: dict[str, torch.Tensor]) -> None:
            self.save_lora_adapter(state_dict)  # moves the adapter out, renames the base weights
            dtype = next(iter(state_dict.values())).dtype
            model = AutoModelForCausalLM.from_config(self.model_config, dtype=dtype)
            missing, unexpected = model.load_state_dict(state_dict, strict=False)
            missing = [k for k in missing if not (k == "lm_head.weight" and self.model_config.tie_word_embeddings)]
            if missing or unexpected:
                raise CheckpointError(
                    f"export-model: the checkpoint does not fit its config (missing {missing[:3]}, "
                    f"unexpected {unexpected[:3]})"
                )
            self.patch_model_generation_config(model).save_pretrained(self.config.target_dir)
            AutoTokenizer.from_pretrained(self.hf_model_config_path).save_pretrained(self.config.target_dir)

    return FullPrecisionMerger


def export_verl(exp_dir: Path, tmp: Path, step: Optional[int], base_path: str) -> bool:
    """Write verl checkpoint `step` to the (new) folder `tmp`: a model folder, or with LoRA the adapter folder
    (`base_path`, the job's model, recorded as its base). Returns whether it is an adapter."""
    from verl.model_merger.base_model_merger import ModelMergerConfig

    actor = verl_checkpoint_at(exp_dir, step)
    merged = tmp.parent / f".{tmp.name}.merged"
    shutil.rmtree(merged, ignore_errors=True)
    try:
        _full_precision_merger()(
            ModelMergerConfig(
                operation="merge",
                backend="fsdp",
                local_dir=str(actor),
                target_dir=str(merged),
                hf_model_config_path=str(actor / "huggingface"),
            )
        ).merge_and_save()
        adapter = merged / "lora_adapter"
        if not adapter.is_dir():
            merged.rename(tmp)
            return False
        shutil.copytree(adapter, tmp)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            if (merged / name).is_file():
                shutil.copy2(merged / name, tmp / name)
        config = json.loads((tmp / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base_path  # peft loads the base from here
        (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2))
        return True
    finally:
        shutil.rmtree(merged, ignore_errors=True)

"""verl's actor beside the project's own serving engine (`--backend verl --engine embedded|vllm`).

In this topology verl's actor workers (FSDP engine, on Ray) do the GRPO update, and the agents' calls
are answered by the trainer's own engine, as with the embedded backend. After each step (and after a
checkpoint restore) the actor's weights travel to the trainer process and into the served model:

- `ActorWeightsWorker` is verl's `ActorRolloutRefWorker` with one more worker method,
  `export_weights`: the full parameters (full fine-tuning) or the LoRA parameters, gathered from the
  FSDP shards through verl's own `engine.get_per_tensor_param`;
- `WeightPull` stands where verl's `CheckpointEngineManager` stands in the driver: `update_weights`
  pulls the weights from rank 0 and loads them into the served model (`load_weights`).

The hybrid topology (`--engine hybrid`: verl launches vLLM engines colocated with its actor and
syncs them with its checkpoint engine) stays in `trainer.StoreFedTrainer` for GPU clusters.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Mapping

import torch
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker

from ajet_trainer.types import PolicyModel

logger = logging.getLogger(__name__)

ACTOR_ROLE = "actor"
"""The worker role without a rollout engine: verl's actor (and, with LoRA, its reference) only."""


class ActorWeightsWorker(ActorRolloutRefWorker):
    """verl's actor worker, able to hand its weights to the driver."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def export_weights(self) -> dict[str, torch.Tensor]:
        """Every rank takes part in the gather (a collective); each returns the full tensors, on CPU, fp32.

        With LoRA, only the adapter's parameters (peft names without the adapter name), else every parameter
        under its Hugging Face name.
        """
        params, _ = self.actor.engine.get_per_tensor_param(base_sync_done=True)
        return {name: tensor.detach().to("cpu", torch.float32).clone() for name, tensor in params}


def load_weights(model: PolicyModel, weights: Mapping[str, torch.Tensor]) -> None:
    """Load what `export_weights` returned into the served model (a peft model when the job uses LoRA).

    Every parameter of the export must land: a name the model does not have is an error, not a skip.
    """
    with torch.no_grad():
        if hasattr(model, "peft_config"):
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(model, dict(weights))
            unexpected = list(getattr(result, "unexpected_keys", []) or [])
        else:
            result = model.load_state_dict(dict(weights), strict=False)
            unexpected = list(result.unexpected_keys)
            missing = [k for k in result.missing_keys if not _tied(model, k)]
            if missing:
                raise ValueError(f"verl's actor exported no value for {len(missing)} parameter(s): {missing[:3]}")
    if unexpected:
        raise ValueError(
            f"verl's actor exported {len(unexpected)} parameter(s) the served model lacks: {unexpected[:3]}"
        )


def _tied(model: PolicyModel, key: str) -> bool:
    """An output layer tied to the input embeddings has no weight of its own in an export."""
    return key == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))


class WeightPull:
    """The driver's `checkpoint_manager` in this topology: weights from verl's actor into the served model."""

    def __init__(self, worker_group: Any, load: Callable[[Mapping[str, torch.Tensor]], None]):
        self.worker_group, self.load = worker_group, load

    def sleep_replicas(self) -> None:
        """Nothing to put to sleep: the served engine is not colocated with verl's workers."""
        return None

    def update_weights(self, global_steps: int = 0) -> dict[str, float]:
        t0 = time.perf_counter()
        weights = self.worker_group.export_weights()[0]  # rank 0's copy; all ranks hold the same tensors
        self.load(weights)
        logger.debug("weights of step %d pulled from verl's actor (%d tensors)", global_steps, len(weights))
        return {"timing_s/pull_weights": time.perf_counter() - t0}

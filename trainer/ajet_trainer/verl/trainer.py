"""verl's separated PPO trainer, fed by the store instead of verl's agent loop.

`StoreFedTrainer` subclasses `verl.experimental.separation.ray_trainer.SeparateRayPPOTrainer` and keeps
its step template (`fit_step`: generate -> reward -> old log-probs -> ref -> advantage -> update ->
weight sync -> checkpoint -> metrics). What changes:

- no dataset: the agents are the data source, so `_create_dataloader` only sets the step budget;
- `_fit_generate` ("wait for generated samples") takes the rewarded episodes the daemon selected from the
  store (after its ROLLING -> ROLLING_POST drain) as a DataProto built with the embedded trainer's sample
  rules; in the hybrid (colocated) layout
  it then puts the vLLM engines to sleep so the update has the GPUs;
- serving, two topologies: *hybrid* (`--engine hybrid`, GPU clusters): the vLLM engines are launched
  by verl (`LLMServerManager`, colocated with the actor workers) and kept in sync by verl's
  `CheckpointEngineManager`; no agent loop runs: their OpenAI addresses are what the proxy routes the
  agents' calls to. *Beside* (`--engine embedded|vllm`, and the CPU): the workers are verl's actor
  only, and `beside.WeightPull` takes the checkpoint manager's place, loading each step's weights into
  the trainer's own serving engine;
- GRPO advantages are computed per episode, so an episode split into several sequences counts once
  in its group (verl's row-wise GRPO would count each sequence) — exactly the embedded trainer's values;
- rows are padded (no trained token) to a multiple of verl's mini-batch, which must divide the batch.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
from omegaconf import OmegaConf, open_dict
from verl import DataProto
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
from verl.single_controller.ray import RayClassWithInitArgs
from verl.trainer.ppo.utils import Role

from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_store.types import PoolEpisode
from ajet_trainer.errors import TrainerError
from ajet_trainer.grpo import episode_advantages
from ajet_trainer.samples import assemble, has_tokens
from ajet_trainer.step_record import batch_reward_mean
from ajet_trainer.types import AssemblyStats, EpisodeSample
from ajet_trainer.verl.beside import ACTOR_ROLE, WeightPull
from ajet_trainer.verl.dataproto import pad_rows, real_rows, samples_to_dataproto
from ajet_trainer.vision import ImageReader

logger = logging.getLogger(__name__)

UNBOUNDED_STEPS = 1_000_000
"""Step budget when the job sets none: a swarm trains until a client stops the engine."""


class StoreCursor:
    """Stands where verl keeps its dataloader: the data source is the store.

    verl saves `state_dict()` in each checkpoint (`global_step_N/data.pt`); it carries the record of the
    step being checkpointed, so a crash between the checkpoint and the store's record loses nothing.
    """

    def __init__(self, steps: int):
        self.steps = steps
        self.pending: dict[str, Any] = {}
        """The step being trained: `step`, `episode_uuids`, `reward_mean`."""
        self.restored: dict[str, Any] = {}
        """What the loaded checkpoint carried."""

    def __len__(self) -> int:
        return self.steps

    def state_dict(self) -> dict[str, Any]:
        return {"source": "ajet-store", **self.pending}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.restored = dict(state)


class StoreFedTrainer(SeparateRayPPOTrainer):
    """verl's trainer whose samples come from the swarm's store."""

    # ------------------------------------------------------------------ wiring
    def attach_store(self, store: Store, job: AgentJetJob, pad_id: int) -> None:
        """Where rewarded episodes come from (call before the first step)."""
        self.ajet_store, self.ajet_job, self.ajet_pad_id = store, job, pad_id
        self.ajet_images: Optional[ImageReader] = None
        """A VL model's images, read back from the store by hash (`read_images`); None for a text model."""
        self.ajet_next: Optional[DataProto] = None
        self.ajet_samples: list[EpisodeSample] = []
        self.ajet_stats = AssemblyStats()

    def _create_dataloader(self, train_dataset: Any, val_dataset: Any, collate_fn: Any, train_sampler: Any) -> None:
        """No dataset (the agents generate); only the step budget the LR schedule needs."""
        steps = self.config.trainer.total_training_steps or UNBOUNDED_STEPS
        self.total_training_steps = int(steps)
        self.train_dataset = self.val_dataset = self.val_dataloader = None
        self.train_dataloader = StoreCursor(self.total_training_steps)
        OmegaConf.set_struct(self.config, True)
        with open_dict(self.config):
            self.config.actor_rollout_ref.actor.optim.total_training_steps = self.total_training_steps
            if OmegaConf.select(self.config, "critic.optim"):
                self.config.critic.optim.total_training_steps = self.total_training_steps

    ajet_load: Optional[Callable[[Mapping[str, torch.Tensor]], None]] = None
    """Beside topology: loads the actor's weights into the served model; None: hybrid (verl's vLLM engines)."""

    def serve_beside(self, load: Callable[[Mapping[str, torch.Tensor]], None]) -> None:
        """Choose the beside topology (call before `init_workers`): verl's actor only, weights go to `load`."""
        self.ajet_load = load

    def _create_actor_rollout_classes(self) -> None:
        """The actor workers (beside) or the hybrid actor+rollout workers (verl's unified engine worker)."""
        pool = self.resource_pool_manager.get_resource_pool(Role.ActorRollout)
        role = ACTOR_ROLE if self.ajet_load is not None else str(Role.ActorRollout)
        cls = RayClassWithInitArgs(
            cls=self.role_worker_mapping[Role.ActorRollout], config=self.config.actor_rollout_ref, role=role
        )
        self.resource_pool_to_cls[pool][str(Role.ActorRollout)] = cls

    def _init_async_rollout_manager(self) -> None:
        """Hybrid: launch verl's vLLM engines colocated with the actor workers; no agent loop (agents are
        outside). Beside: nothing to launch."""
        from verl.workers.rollout.llm_server import LLMServerManager

        if self.ajet_load is not None:
            self.async_rollout_mode, self.async_rollout_manager, self.llm_server_manager = False, None, None
            return
        self.async_rollout_mode = True
        self.async_rollout_manager = None
        self.llm_server_manager = LLMServerManager.create(
            config=self.config,
            worker_group=self.actor_rollout_wg,
            rollout_resource_pool=self.resource_pool_manager.get_resource_pool(Role.ActorRollout),
        )

    def _create_reference_policy_class(self) -> None:
        """With LoRA the reference is the actor without its adapter (verl's `ref_in_actor`): no ref workers."""
        if not self.ref_in_actor:
            super()._create_reference_policy_class()

    def _init_reward_loop(self) -> None:
        """Rewards come from the agents (`end_episode`): no reward workers, unless a reward model is configured."""
        if self.use_rm:
            super()._init_reward_loop()
        else:
            self.reward_loop_manager = None

    def init_workers(self) -> None:
        """verl's worker setup, then vLLM engines asleep until `begin` loads the (restored) weights into them.

        Beside: the same steps as verl's `init_workers` (separation/ray_trainer.py:105), with `WeightPull`
        where verl builds its `CheckpointEngineManager` over the vLLM engines this topology does not have."""
        if self.ajet_load is None:
            super().init_workers()
            self.checkpoint_manager.sleep_replicas()
            return
        self._init_resource_pools()
        self._create_worker_classes()
        self._init_worker_groups()
        self._init_models()
        self._init_reward_loop()
        self._init_async_rollout_manager()
        self.checkpoint_manager = WeightPull(self.actor_rollout_wg, self.ajet_load)

    def server_addresses(self) -> list[str]:
        """`host:port` of each vLLM engine's OpenAI server (hybrid; none beside)."""
        return [] if self.llm_server_manager is None else list(self.llm_server_manager.get_addresses())

    def begin(self) -> int:
        """fit()'s prologue without its data loop: restore, push weights into the vLLM engines. Returns the step."""
        from tqdm import tqdm
        from verl.utils.tracking import Tracking

        self.logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.global_steps = 0
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(
            self.global_steps
        )  # the vLLM engines / the served model get these weights
        restored = self.global_steps
        # verl's fit_step updates this bar; a store-fed run has no known end (its total is UNBOUNDED_STEPS), so the
        # bar would print "2/1000000 [72694:45:16 left]" into every log: it is kept silent, and each step is logged
        # by the step record instead
        self.progress_bar = tqdm(total=self.total_training_steps, initial=restored, disable=True)
        self.global_steps += 1  # verl counts steps from 1
        return restored

    # ------------------------------------------------------------------ the step
    def train_on(self, batch: Sequence[PoolEpisode]) -> dict[str, Any]:
        """One verl step on these store episodes; returns verl's metrics of the step.

        A batch without any trainable call (every call failed, or no token ids) still counts as a step,
        as in the embedded trainer: its episodes are consumed, the weights do not change.
        """
        record = {
            "step": self.global_steps,
            "episode_uuids": [p.uuid for p in batch],
            "reward_mean": batch_reward_mean(batch),
        }
        return self._train(self.store_batch(batch), record)

    def train_samples(self, samples: Sequence[EpisodeSample]) -> dict[str, Any]:
        """One verl step on samples already assembled (not read from the store: benchmarks, the agreement test
        of the two backends); returns verl's metrics of the step."""
        self.ajet_samples = list(samples)
        data = samples_to_dataproto(samples, self.ajet_pad_id, self.ajet_images) if samples else None
        return self._train(data, {"step": self.global_steps})

    def _train(self, data: Optional[DataProto], record: dict[str, Any]) -> dict[str, Any]:
        """The step on `data` (None: nothing trainable, the step still counts); `record` goes into its checkpoint."""
        self.train_dataloader.pending = record
        if data is None:
            logger.warning("verl step %d: no trainable call in the batch, no update", self.global_steps)
            self.global_steps += 1
            return {"training/empty_batch": 1.0}
        self.ajet_next = data
        self.fit_step(None)
        return dict(self.metrics)

    def _fit_get_batch(self, batch_dict: Any) -> None:
        return None  # there is no prompt batch: `_fit_generate` reads finished episodes

    def store_batch(self, pool: Sequence[PoolEpisode]) -> Optional[DataProto]:
        """These episodes' calls -> samples (the embedded rules) -> DataProto; None if nothing is trainable."""
        job = self.ajet_job
        samples, self.ajet_stats = assemble(
            self.ajet_store.rewarded_episodes(pool), job.max_prompt_length, job.max_response_length, job.overlong
        )
        self.ajet_samples = samples
        if not has_tokens(samples):
            return None
        logger.info("verl batch: %d episodes, %d sequences", self.ajet_stats.episodes, self.ajet_stats.sequences)
        data = samples_to_dataproto(samples, self.ajet_pad_id, self.ajet_images)
        if self.ajet_images is not None:
            self.ajet_images.forget()
        return data

    def _fit_generate(self, batch: Any = None) -> DataProto:
        """verl's generation step, replaced: the agents already generated, the store has the samples."""
        out, self.ajet_next = self.ajet_next, None
        if out is None:  # the daemon's state machine picks the batch; `train_on` hands it over
            raise TrainerError("no batch handed over: drive steps with StoreFedTrainer.train_on")
        out.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        out.batch["rm_scores"] = out.batch["token_level_scores"].clone()  # what verl's extract_reward reads
        # verl's update asserts that its mini-batches (ppo_mini_batch_size x n rows) divide the batch
        actor = self.config.actor_rollout_ref.actor
        out = pad_rows(out, actor.ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n)
        if self.checkpoint_manager is not None:
            self.checkpoint_manager.sleep_replicas()  # colocated: free the GPUs for log-probs and the update
        if self.config.trainer.balance_batch:
            self._balance_batch(out, metrics=self.metrics)
        out.meta_info["global_token_num"] = torch.sum(out.batch["attention_mask"], dim=-1).tolist()
        # a VL batch's vision tower stays out of verl's FLOPs estimate: verl reads Qwen3-VL's vision fields
        # (`intermediate_size`, `out_hidden_size`) for Qwen2-VL too, which Qwen2-VL's vision config lacks
        out.meta_info["images_seqlens"] = None if "multi_modal_inputs" in out.non_tensor_batch else []
        return out

    def _fit_compute_advantage(self, batch: DataProto) -> DataProto:
        """verl's advantage step (KL in reward, rollout correction), then GRPO per episode, not per row."""
        batch = super()._fit_compute_advantage(batch)
        if str(self.config.algorithm.adv_estimator) == "grpo":
            adv = episode_advantages(
                self.ajet_samples, norm_by_std=self.config.algorithm.get("norm_adv_by_std_in_grpo", True)
            )
            per_row = torch.tensor(
                [adv.get(u, 0.0) for u in batch.non_tensor_batch["episode_uuid"]], dtype=torch.float32
            )
            scores = per_row.unsqueeze(-1) * batch.batch["response_mask"]
            batch.batch["advantages"], batch.batch["returns"] = scores, scores.clone()
        return batch

    def _fit_collect_metrics(self, batch: DataProto) -> None:
        """verl's data metrics over the episodes' rows only (padding rows would dilute the means)."""
        super()._fit_collect_metrics(real_rows(batch))

"""verl's separated PPO trainer, fed by the store instead of verl's agent loop.

`StoreFedTrainer` subclasses `verl.experimental.separation.ray_trainer.SeparateRayPPOTrainer` and
overrides its "wait for generated samples" step (`_fit_generate`): it waits until the job's batch
policy is satisfied by rewarded episodes in the store and returns them as a DataProto built with the
embedded trainer's sample rules. The uuids of the batch are kept so the step can be recorded (and the
episodes marked consumed) after the update.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from verl import DataProto
from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer

from ajet.job import AgentJetJob
from ajet_proxy.batch_policy import select_batch
from ajet_proxy.store import Store
from ajet_trainer.samples import assemble
from ajet_trainer.verl_backend.dataproto import samples_to_dataproto

logger = logging.getLogger(__name__)


class StoreFedTrainer(SeparateRayPPOTrainer):
    """verl's trainer whose samples come from the swarm's store."""

    def attach_store(self, store: Store, job: AgentJetJob, pad_id: int, poll_s: float = 0.5) -> None:
        """Where rewarded episodes come from (call before `fit`)."""
        self.ajet_store, self.ajet_job, self.ajet_pad_id, self.ajet_poll_s = store, job, pad_id, poll_s
        self.ajet_batch_uuids: list[str] = []

    def store_batch(self, timeout: Optional[float] = None) -> DataProto:
        """Block until the batch policy is satisfied; the batch as a DataProto."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self.ajet_job
        while True:
            row = self.ajet_store.engine_row()
            batch = select_batch(self.ajet_store.pool_episodes(), row.batch_mode, job.batch_size, job.num_repeat)
            if batch:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("the rollout pool did not fill in time")
            time.sleep(self.ajet_poll_s)
        episodes = [(p.uuid, p.task_id, p.reward, self.ajet_store.calls(p.uuid)) for p in batch]
        samples, stats = assemble(episodes, job.max_prompt_length, job.max_response_length)
        logger.info("verl batch: %d episodes, %d sequences", stats.episodes, stats.sequences)
        self.ajet_batch_uuids = [s.episode_uuid for s in samples]
        return samples_to_dataproto(samples, self.ajet_pad_id)

    def _fit_generate(self, batch: Any = None) -> DataProto:
        """verl's generation step, replaced: the agents already generated, the store has the samples."""
        return self.store_batch()

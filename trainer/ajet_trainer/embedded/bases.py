"""The trainer's shared base models, by model folder and device, and which experiments attach to one.

The registry is light to import (the trainer makes it at start, before torch has loaded); a base itself, its model
and engine, is `shared_base.SharedBase`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from ajet.job import AgentJetJob
from ajet_trainer.options import TrainerOptions

if TYPE_CHECKING:
    from ajet_trainer.embedded.shared_base import AdapterEngines, SharedBase
    from ajet_trainer.types import PolicyModel, Tokenizer

logger = logging.getLogger(__name__)


def shares_base(job: AgentJetJob, opts: TrainerOptions) -> bool:
    """Whether the job trains on a shared base: a LoRA adapter, synchronous, on the embedded backend and engine
    (`opts` resolved)."""
    return opts.backend == "embedded" and opts.engine == "embedded" and job.uses_lora and job.max_staleness == 0


class SharedBases:
    """The trainer's shared bases, by model folder and device: the one owner of each base's model and engine."""

    def __init__(self) -> None:
        self.bases: dict[tuple[str, str], SharedBase] = {}

    def attach(
        self, name: str, job: AgentJetJob, model_path: str, device: str, opts: TrainerOptions
    ) -> Optional[tuple[PolicyModel, Tokenizer, AdapterEngines]]:
        """Attach adapter `name` of `job` to the base of `model_path` on `device` (loaded and served as the trainer's
        `opts` say if none is yet); None when the base's engine settings differ from the job's (it keeps its own
        model)."""
        from ajet_trainer.embedded.shared_base import AdapterEngines, open_base

        key = (model_path, device)
        base = self.bases.get(key)
        if base is not None and name in base.adapters:  # a session that never closed (a failed boot): start afresh
            self.release(base, name)
            base = self.bases.get(key)
        if base is None:
            base = self.bases[key] = open_base(name, job, model_path, device, opts)
        elif base.engine.batcher.partial_rollouts != job.partial_rollouts:
            logger.info("%s keeps a model of its own: partial_rollouts differs from the shared base's", name)
            return None
        base.attach(name, job)
        return base.model, base.tokenizer, AdapterEngines(base, name, release=lambda: self.release(base, name))

    def release(self, base: SharedBase, name: str) -> None:
        """Detach adapter `name`; the last one out stops the engine and drops the model."""
        if base.detach(name):
            base.engine.stop()
            self.bases = {k: b for k, b in self.bases.items() if b is not base}

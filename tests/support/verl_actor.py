"""verl's real actor on the CPU platform, beside a model of the caller's: for tests and benchmarks that train
fixed batches without a store (`StoreFedTrainer.train_samples`)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

import torch

from ajet import AgentJetJob
from ajet_trainer.tiny_model import builtin_model_path


@contextmanager
def verl_cpu_trainer(job: AgentJetJob, exp: Path, load: Callable[[Mapping[str, torch.Tensor]], None]) -> Iterator:
    """verl's trainer for `job` (one Ray CPU worker per `n_gpu`), started and restored (`begin`), the actor's
    weights going to `load` (first the start weights); Ray is shut down on exit when this started it."""
    import ray
    from omegaconf import OmegaConf

    from ajet_trainer.metrics import tracker_env
    from ajet_trainer.verl.config import compose_verl_config
    from ajet_trainer.verl.cpu_platform import use_cpu_platform
    from ajet_trainer.verl.launch import start_trainer
    from ajet_trainer.verl.session import session_overrides

    use_cpu_platform()
    config = compose_verl_config(
        job, model_path=str(builtin_model_path(job.model)), extra=session_overrides(job, exp, hybrid=False, cpu=True)
    )
    OmegaConf.resolve(config)
    trainer, owns = start_trainer(config, job, None, None, cpu=True, load=load)
    try:
        with tracker_env(exp):
            trainer.begin()
        yield trainer
    finally:
        if owns:
            ray.shutdown()

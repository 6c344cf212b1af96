"""The verl backend (`ajet-trainer start --backend verl`): verl's trainer on Ray, fed by the store, training
beside the trainer's own engine (CPU or CUDA) or serving from verl's own vLLM replicas (hybrid, CUDA).

Names load on first use (PEP 562): importing `ajet_trainer.verl_backend.config` (the job -> verl key
mapping the embedded trainer uses too) must not load verl's Ray trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_trainer.lazy import lazy_getattr

_EXPORTS = {
    "ActorWeightsWorker": "ajet_trainer.verl_backend.beside",
    "PlatformCPU": "ajet_trainer.verl_backend.cpu_platform",
    "WeightPull": "ajet_trainer.verl_backend.beside",
    "export_verl": "ajet_trainer.verl_backend.checkpoint_export",
    "load_weights": "ajet_trainer.verl_backend.beside",
    "use_cpu_platform": "ajet_trainer.verl_backend.cpu_platform",
    "StoreCursor": "ajet_trainer.verl_backend.trainer",
    "StoreFedTrainer": "ajet_trainer.verl_backend.trainer",
    "VerlSession": "ajet_trainer.verl_backend.session",
    "build_trainer": "ajet_trainer.verl_backend.session",
    "compose_verl_config": "ajet_trainer.verl_backend.config",
    "job_overrides": "ajet_trainer.verl_backend.config",
    "open_verl_session": "ajet_trainer.verl_backend.session",
    "pad_rows": "ajet_trainer.verl_backend.dataproto",
    "real_rows": "ajet_trainer.verl_backend.dataproto",
    "samples_to_dataproto": "ajet_trainer.verl_backend.dataproto",
    "write_job_yaml": "ajet_trainer.verl_backend.config",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from ajet_trainer.verl_backend.beside import ActorWeightsWorker, WeightPull, load_weights
    from ajet_trainer.verl_backend.checkpoint_export import export_verl
    from ajet_trainer.verl_backend.config import compose_verl_config, job_overrides, write_job_yaml
    from ajet_trainer.verl_backend.cpu_platform import PlatformCPU, use_cpu_platform
    from ajet_trainer.verl_backend.dataproto import pad_rows, real_rows, samples_to_dataproto
    from ajet_trainer.verl_backend.session import VerlSession, build_trainer, open_verl_session
    from ajet_trainer.verl_backend.trainer import StoreCursor, StoreFedTrainer

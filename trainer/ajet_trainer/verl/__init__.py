"""The verl backend (`ajet-trainer start --backend verl`): verl's trainer on Ray, fed by the store, training
beside the trainer's own engine (CPU or CUDA) or serving from verl's own vLLM engines (hybrid, CUDA).

Names load on first use (PEP 562): importing `ajet_trainer.verl.config` (the job -> verl key mapping) must not
load verl's Ray trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_trainer.lazy import lazy_getattr

_EXPORTS = {
    "ActorWeightsWorker": "ajet_trainer.verl.beside",
    "PlatformCPU": "ajet_trainer.verl.cpu_platform",
    "WeightPull": "ajet_trainer.verl.beside",
    "export_verl": "ajet_trainer.verl.checkpoint_export",
    "load_weights": "ajet_trainer.verl.beside",
    "use_cpu_platform": "ajet_trainer.verl.cpu_platform",
    "StoreCursor": "ajet_trainer.verl.trainer",
    "StoreFedTrainer": "ajet_trainer.verl.trainer",
    "VerlSession": "ajet_trainer.verl.session",
    "build_trainer": "ajet_trainer.verl.launch",
    "compose_verl_config": "ajet_trainer.verl.config",
    "job_overrides": "ajet_trainer.verl.config",
    "open_verl_session": "ajet_trainer.verl.session",
    "pad_rows": "ajet_trainer.verl.dataproto",
    "real_rows": "ajet_trainer.verl.dataproto",
    "samples_to_dataproto": "ajet_trainer.verl.dataproto",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from ajet_trainer.verl.beside import ActorWeightsWorker, WeightPull, load_weights
    from ajet_trainer.verl.checkpoint_export import export_verl
    from ajet_trainer.verl.config import compose_verl_config, job_overrides
    from ajet_trainer.verl.cpu_platform import PlatformCPU, use_cpu_platform
    from ajet_trainer.verl.dataproto import pad_rows, real_rows, samples_to_dataproto
    from ajet_trainer.verl.launch import build_trainer
    from ajet_trainer.verl.session import VerlSession, open_verl_session
    from ajet_trainer.verl.trainer import StoreCursor, StoreFedTrainer

"""AgentJet Swarm trainer: GRPO (full or LoRA) from the episode store, with an embedded engine.

The trainer meets the proxy only in the store (`ajet_store`); it never imports `ajet_proxy`. Names are
loaded on first use (PEP 562), so `ajet-trainer --help` and the store-only tools import no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_trainer.lazy import lazy_getattr

_EXPORTS = {
    "AssemblyStats": "ajet_trainer.types",
    "CheckpointError": "ajet_trainer.errors",
    "ConfigurationError": "ajet_trainer.errors",
    "EmbeddedEngine": "ajet_trainer.embedded.server",
    "EmbeddedEngines": "ajet_trainer.embedded.engines",
    "EmbeddedSession": "ajet_trainer.embedded.session",
    "EngineStartError": "ajet_trainer.errors",
    "Engines": "ajet_trainer.interfaces",
    "EpisodeSample": "ajet_trainer.types",
    "GenerationFailed": "ajet_trainer.errors",
    "Learner": "ajet_trainer.embedded.learner",
    "ModelFolderNotFound": "ajet_trainer.errors",
    "TrainSequence": "ajet_trainer.types",
    "TrainerDaemon": "ajet_trainer.daemon",
    "TrainerError": "ajet_trainer.errors",
    "TrainerOptions": "ajet_trainer.options",
    "TrainingSession": "ajet_trainer.interfaces",
    "VllmServer": "ajet_trainer.vllm.server",
    "VllmEngines": "ajet_trainer.vllm.engines",
    "VllmSettings": "ajet_trainer.vllm.server",
    "assemble": "ajet_trainer.samples",
    "batch_reward_mean": "ajet_trainer.step_record",
    "builtin_model_path": "ajet_trainer.tiny_model",
    "collate": "ajet_trainer.grpo",
    "default_experiment_dir": "ajet_trainer.experiment_dir",
    "episode_advantages": "ajet_trainer.grpo",
    "episode_sequences": "ajet_trainer.samples",
    "finish_step": "ajet_trainer.step_record",
    "load_policy": "ajet_trainer.policy",
    "open_embedded_session": "ajet_trainer.embedded.session",
    "open_session": "ajet_trainer.factory",
    "policy_loss": "ajet_trainer.grpo",
    "reconcile_store": "ajet_trainer.step_record",
    "resolve_model_path": "ajet_trainer.tiny_model",
    "sequence_logprobs": "ajet_trainer.grpo",
    "start_engines": "ajet_trainer.factory",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from ajet_trainer.daemon import TrainerDaemon
    from ajet_trainer.embedded.engines import EmbeddedEngines
    from ajet_trainer.embedded.learner import Learner
    from ajet_trainer.embedded.server import EmbeddedEngine
    from ajet_trainer.embedded.session import EmbeddedSession, open_embedded_session
    from ajet_trainer.errors import (
        CheckpointError,
        ConfigurationError,
        EngineStartError,
        GenerationFailed,
        ModelFolderNotFound,
        TrainerError,
    )
    from ajet_trainer.experiment_dir import default_experiment_dir
    from ajet_trainer.factory import open_session, start_engines
    from ajet_trainer.grpo import collate, episode_advantages, policy_loss, sequence_logprobs
    from ajet_trainer.interfaces import Engines, TrainingSession
    from ajet_trainer.options import TrainerOptions
    from ajet_trainer.policy import load_policy
    from ajet_trainer.samples import assemble, episode_sequences
    from ajet_trainer.step_record import batch_reward_mean, finish_step, reconcile_store
    from ajet_trainer.tiny_model import builtin_model_path, resolve_model_path
    from ajet_trainer.types import AssemblyStats, EpisodeSample, TrainSequence
    from ajet_trainer.vllm.engines import VllmEngines
    from ajet_trainer.vllm.server import VllmServer, VllmSettings

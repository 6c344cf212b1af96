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
    "EmbeddedEngine": "ajet_trainer.engine",
    "EmbeddedServing": "ajet_trainer.serving",
    "EngineRequestError": "ajet_trainer.errors",
    "GenerationFailed": "ajet_trainer.errors",
    "EngineStartError": "ajet_trainer.errors",
    "EpisodeSample": "ajet_trainer.types",
    "Learner": "ajet_trainer.learner",
    "ModelNotFound": "ajet_trainer.errors",
    "Serving": "ajet_trainer.protocols",
    "Session": "ajet_trainer.embedded_session",
    "TrainSequence": "ajet_trainer.types",
    "TrainerDaemon": "ajet_trainer.daemon",
    "TrainerError": "ajet_trainer.errors",
    "TrainerOptions": "ajet_trainer.options",
    "TrainingSession": "ajet_trainer.protocols",
    "VllmEngine": "ajet_trainer.engine.vllm",
    "VllmServing": "ajet_trainer.serving",
    "VllmSettings": "ajet_trainer.engine.vllm",
    "assemble": "ajet_trainer.samples",
    "batch_reward_mean": "ajet_trainer.steps",
    "builtin_model_path": "ajet_trainer.tiny_model",
    "collate": "ajet_trainer.grpo",
    "default_experiment_dir": "ajet_trainer.options",
    "episode_advantages": "ajet_trainer.grpo",
    "episode_sequences": "ajet_trainer.samples",
    "load_policy": "ajet_trainer.learner",
    "make_serving": "ajet_trainer.serving",
    "open_embedded_session": "ajet_trainer.embedded_session",
    "open_session": "ajet_trainer.backends",
    "policy_loss": "ajet_trainer.grpo",
    "reconcile_store": "ajet_trainer.steps",
    "record_step": "ajet_trainer.steps",
    "resolve_model_path": "ajet_trainer.tiny_model",
    "sequence_logprobs": "ajet_trainer.grpo",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from ajet_trainer.backends import open_session
    from ajet_trainer.daemon import TrainerDaemon
    from ajet_trainer.embedded_session import Session, open_embedded_session
    from ajet_trainer.engine import EmbeddedEngine
    from ajet_trainer.engine.vllm import VllmEngine, VllmSettings
    from ajet_trainer.errors import (
        CheckpointError,
        ConfigurationError,
        EngineRequestError,
        EngineStartError,
        GenerationFailed,
        ModelNotFound,
        TrainerError,
    )
    from ajet_trainer.grpo import collate, episode_advantages, policy_loss, sequence_logprobs
    from ajet_trainer.learner import Learner, load_policy
    from ajet_trainer.options import TrainerOptions, default_experiment_dir
    from ajet_trainer.protocols import Serving, TrainingSession
    from ajet_trainer.samples import assemble, episode_sequences
    from ajet_trainer.serving import EmbeddedServing, VllmServing, make_serving
    from ajet_trainer.steps import batch_reward_mean, reconcile_store, record_step
    from ajet_trainer.tiny_model import builtin_model_path, resolve_model_path
    from ajet_trainer.types import AssemblyStats, EpisodeSample, TrainSequence

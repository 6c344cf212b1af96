"""AgentJet Swarm trainer: GRPO (full or LoRA) from the episode store, with an embedded engine.

The trainer meets the proxy only in the store (`ajet_store`); it never imports `ajet_proxy`. Names are
loaded on first use (PEP 562), so `ajet-trainer --help` and the store-only tools import no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "AssemblyStats": "ajet_trainer.types",
    "CheckpointError": "ajet_trainer.errors",
    "ConfigurationError": "ajet_trainer.errors",
    "EmbeddedEngine": "ajet_trainer.engine",
    "EmbeddedServing": "ajet_trainer.serving",
    "EngineRequestError": "ajet_trainer.errors",
    "EngineStartError": "ajet_trainer.errors",
    "EpisodeSample": "ajet_trainer.types",
    "Learner": "ajet_trainer.learner",
    "ModelNotFound": "ajet_trainer.errors",
    "Serving": "ajet_trainer.protocols",
    "Session": "ajet_trainer.session",
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
    "open_embedded_session": "ajet_trainer.session",
    "open_session": "ajet_trainer.backends",
    "policy_loss": "ajet_trainer.grpo",
    "reconcile_store": "ajet_trainer.steps",
    "record_step": "ajet_trainer.steps",
    "resolve_model_path": "ajet_trainer.tiny_model",
    "sequence_logprobs": "ajet_trainer.grpo",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ajet_trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from ajet_trainer.types import AssemblyStats
    from ajet_trainer.errors import CheckpointError
    from ajet_trainer.errors import ConfigurationError
    from ajet_trainer.engine import EmbeddedEngine
    from ajet_trainer.serving import EmbeddedServing
    from ajet_trainer.errors import EngineRequestError
    from ajet_trainer.errors import EngineStartError
    from ajet_trainer.types import EpisodeSample
    from ajet_trainer.learner import Learner
    from ajet_trainer.errors import ModelNotFound
    from ajet_trainer.protocols import Serving
    from ajet_trainer.session import Session
    from ajet_trainer.types import TrainSequence
    from ajet_trainer.daemon import TrainerDaemon
    from ajet_trainer.errors import TrainerError
    from ajet_trainer.options import TrainerOptions
    from ajet_trainer.protocols import TrainingSession
    from ajet_trainer.engine.vllm import VllmEngine
    from ajet_trainer.serving import VllmServing
    from ajet_trainer.engine.vllm import VllmSettings
    from ajet_trainer.samples import assemble
    from ajet_trainer.steps import batch_reward_mean
    from ajet_trainer.tiny_model import builtin_model_path
    from ajet_trainer.grpo import collate
    from ajet_trainer.options import default_experiment_dir
    from ajet_trainer.grpo import episode_advantages
    from ajet_trainer.samples import episode_sequences
    from ajet_trainer.learner import load_policy
    from ajet_trainer.serving import make_serving
    from ajet_trainer.session import open_embedded_session
    from ajet_trainer.backends import open_session
    from ajet_trainer.grpo import policy_loss
    from ajet_trainer.steps import reconcile_store
    from ajet_trainer.steps import record_step
    from ajet_trainer.tiny_model import resolve_model_path
    from ajet_trainer.grpo import sequence_logprobs

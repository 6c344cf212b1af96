"""AgentJet Swarm trainer: GRPO (full or LoRA) from the episode store, with an embedded engine."""

from ajet_trainer.daemon import TrainerDaemon, TrainerOptions
from ajet_trainer.engine import EmbeddedEngine
from ajet_trainer.engine.vllm import VllmEngine, VllmSettings
from ajet_trainer.grpo import collate, episode_advantages, policy_loss, sequence_logprobs
from ajet_trainer.learner import Learner, load_policy
from ajet_trainer.samples import assemble, episode_sequences
from ajet_trainer.tiny_model import builtin_model_path, resolve_model_path
from ajet_trainer.types import AssemblyStats, EpisodeSample, StepResult, TrainSequence

__all__ = [
    "AssemblyStats",
    "EmbeddedEngine",
    "EpisodeSample",
    "Learner",
    "StepResult",
    "TrainSequence",
    "TrainerDaemon",
    "TrainerOptions",
    "VllmEngine",
    "VllmSettings",
    "assemble",
    "builtin_model_path",
    "collate",
    "episode_advantages",
    "episode_sequences",
    "load_policy",
    "policy_loss",
    "resolve_model_path",
    "sequence_logprobs",
]

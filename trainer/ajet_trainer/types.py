"""RL types of the trainer: sequences, episodes' samples, batch and step metrics (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainSequence:
    """One training sequence: a prompt and a response built from one or more merged LLM calls."""

    episode_uuid: str
    """The episode it came from."""
    task_id: str
    """GRPO group of its episode."""
    prompt_ids: tuple[int, ...]
    """Prompt token ids of the first merged call (as the engine tokenised them)."""
    response_ids: tuple[int, ...]
    """Completions and the tokens inserted between them, in order."""
    response_mask: tuple[int, ...]
    """1 for tokens the policy sampled (trained), 0 for inserted ones (tool output, user turns)."""
    rollout_logprobs: tuple[float, ...]
    """The engine's log-prob of each response token (0.0 where the mask is 0)."""
    num_calls: int = 1
    """How many LLM calls were merged into it."""


@dataclass(frozen=True)
class EpisodeSample:
    """An episode ready for GRPO: its reward and its sequences."""

    episode_uuid: str
    """The episode."""
    task_id: str
    """GRPO group."""
    reward: float
    """Its scalar reward."""
    sequences: tuple[TrainSequence, ...]
    """Its sequences (one per non-prefix turn boundary)."""


@dataclass(frozen=True)
class AssemblyStats:
    """What sample assembly dropped or cut, for the step's metrics."""

    episodes: int = 0
    """Episodes turned into samples."""
    sequences: int = 0
    """Sequences produced."""
    calls: int = 0
    """LLM calls read."""
    merged_calls: int = 0
    """Calls merged into an earlier call's sequence."""
    failed_calls: int = 0
    """Calls with an error (skipped)."""
    empty_episodes: int = 0
    """Episodes without a usable call (skipped)."""
    prompt_truncated: int = 0
    """Sequences whose prompt was cut to `max_prompt_length` (from the left)."""
    response_truncated: int = 0
    """Sequences whose response was cut to `max_response_length`."""


@dataclass(frozen=True)
class StepResult:
    """One training step's outcome, as recorded in the store and the metrics log."""

    step: int
    """Global step number."""
    policy_version: int
    """Version of the new weights."""
    episode_uuids: tuple[str, ...]
    """Episodes the step consumed."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """reward mean/std, loss, kl, grad norm, entropy, tokens, clip fraction, timings, ..."""

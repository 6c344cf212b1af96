"""RL types of the trainer: sequences, episodes' samples, assembly counts (frozen dataclasses).

Also the names of the model and tokenizer types the trainer passes around (transformers' and peft's,
imported for type checking only, so importing this module loads neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, Union

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PolicyModel: TypeAlias = Union["PreTrainedModel", "PeftModel"]
"""The trained policy: a transformers causal LM, wrapped by peft when training LoRA."""
Tokenizer: TypeAlias = "PreTrainedTokenizerBase"
"""The policy's tokenizer."""
Metrics: TypeAlias = dict[str, float]
"""A step's metrics by name (counts are ints, flags bools; both are floats to a type checker)."""


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

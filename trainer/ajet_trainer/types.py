"""RL types of the trainer: sequences, episodes' samples, assembly counts (frozen dataclasses).

Also the names of the model and tokenizer types the trainer passes around (transformers' and peft's,
imported for type checking only, so importing this module loads neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypeAlias, Union

from ajet_core.labels import Label, fallback_reason, starts_segment
from ajet_store.sequences import BRANCH, UNMATCHED
from ajet_store.types import TrainSequence

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from ajet.job import AgentJetJob
    from ajet_store import Store

PolicyModel: TypeAlias = Union["PreTrainedModel", "PeftModel"]
"""The trained policy: a transformers causal LM, wrapped by peft when training LoRA."""
Tokenizer: TypeAlias = "PreTrainedTokenizerBase"
"""The policy's tokenizer."""
Metrics: TypeAlias = dict[str, float]
"""A step's metrics by name (counts are ints, flags bools; both are floats to a type checker)."""


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


MISSED = (Label.RENDERED, UNMATCHED)
"""Causes of a sequence's start (beside `fallback:<reason>`) where a call might have continued its conversation."""


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
    tokens: int = 0
    """Tokens of the kept sequences (prompt + response): what the update processes."""
    trained_tokens: int = 0
    """Response tokens of the kept sequences that are trained (mask 1)."""
    truncated_calls: int = 0
    """Trainable calls the server's cap cut (`CallRecord.truncated`), trained by the job's `overlong` rule."""
    client_gone_calls: int = 0
    """Calls whose client went away before the answer reached it (never trained; also in `failed_calls`)."""
    overlong_masked_episodes: int = 0
    """Episodes the `mask` rule left with nothing to train (kept, without sequences, for their group's statistics)."""
    overlong_zeroed_episodes: int = 0
    """Episodes the `zero_reward` rule gave reward 0.0."""
    answer_tokens: int = 0
    """Completion tokens of the trainable calls read: over `calls`, the trained answers' length (beside the
    generated answers' length the engine reports, a length bias shows)."""
    mixed_version_calls: int = 0
    """Trainable calls whose answer two or more policy versions sampled (an update came mid-answer: partial
    rollouts)."""
    labels: tuple[tuple[str, int], ...] = ()
    """Calls by how the proxy built their prompt (`first`, `extended`, `rendered`, `segment:<cause>`,
    `fallback:<reason>`; calls logged before the proxy labelled them count as `unlabelled`), sorted by label."""
    starts: tuple[tuple[str, int], ...] = ()
    """Sequences by why they started (`ajet_trainer.samples`: `first`, `segment:<cause>`, `branch`,
    `fallback:<reason>`, `rendered`, `unmatched`), sorted."""

    @property
    def missed_merges(self) -> int:
        """Sequences that started where a call might have continued its conversation: fallbacks, rendered
        history, and calls whose ids did not continue the turn the proxy built them on."""
        return sum(n for cause, n in self.starts if fallback_reason(cause) is not None or cause in MISSED)

    def metrics(self) -> dict[str, float]:
        """The step's metrics of the assembly: each count as `samples/<field>`, and the trajectories' figures as
        `history/*`: `merge_rate` (merged calls over merged + missed merges; 1.0 without either), `segments`,
        `branches`, `sequences_per_episode`, `tokens_per_episode`, `trained_tokens_per_episode`, `extended`,
        `fallbacks`, `fallback/<reason>` per reason (the proxy's labels) and `starts/<cause>` per cause."""
        skip = ("labels", "starts")
        out: dict[str, float] = {f"samples/{k}": float(v) for k, v in vars(self).items() if k not in skip}
        per = max(self.episodes, 1)
        chances = self.merged_calls + self.missed_merges
        out["history/merge_rate"] = self.merged_calls / chances if chances else 1.0
        out["history/sequences_per_episode"] = self.sequences / per
        out["history/tokens_per_episode"] = self.tokens / per
        out["history/trained_tokens_per_episode"] = self.trained_tokens / per
        trainable = sum(n for _, n in self.labels) or 1
        out["partial/mixed_version_share"] = self.mixed_version_calls / trainable
        out["partial/trained_answer_tokens_mean"] = self.answer_tokens / trainable
        starts = dict(self.starts)
        out["history/segments"] = float(sum(n for cause, n in starts.items() if starts_segment(cause)))
        out["history/branches"] = float(starts.get(BRANCH, 0))
        out.update({f"history/starts/{cause}": float(n) for cause, n in starts.items()})
        labels = dict(self.labels)
        out["history/extended"] = float(labels.get(Label.EXTENDED, 0))
        reasons = ((fallback_reason(k), n) for k, n in labels.items())
        fallbacks = {reason: n for reason, n in reasons if reason is not None}
        out["history/fallbacks"] = float(sum(fallbacks.values()))
        out.update({f"history/fallback/{reason}": float(n) for reason, n in fallbacks.items()})
        return out


@dataclass(frozen=True)
class PhaseTimes:
    """Where the embedded engine's sampling went, as running totals: the parts of a rollout that
    `bench/real_model_profile.py` sets against their bounds (FLOPs at the machine's matmul rate, bytes at its memory
    bandwidth)."""

    prefill_s: float = 0.0
    """Seconds in the model's forwards over prompts (the tokens after those the prefix cache held), and over rows run
    again after an update."""
    prefill_tokens: int = 0
    """The tokens those forwards ran (a group's alike prompts once, padding not counted)."""
    decode_s: float = 0.0
    """Seconds in the one-token forwards of running batches."""
    decode_steps: int = 0
    """Those forwards (each reads the weights once, however many rows it runs)."""
    decode_tokens: int = 0
    """The rows those forwards ran, summed."""
    constrain_s: float = 0.0
    """Seconds masking logits to grammars and advancing them by the drawn tokens (constrained decoding)."""
    sample_s: float = 0.0
    """Seconds drawing each token and handing it on (a step's softmax and per-row Python), constraints left out."""


@dataclass(frozen=True)
class EngineCounters:
    """What the engines did since they started, as running totals: a step reports the difference from the last."""

    answers: int = 0
    """Answers finished, those of clients that left not counted."""
    answer_tokens: int = 0
    """The tokens of those answers."""
    busy_s: Optional[float] = None
    """Seconds spent sampling (the embedded engine's batches, their waits for an update left out); None where the
    engine does not count it (vLLM)."""
    reprefilled_tokens: Optional[int] = None
    """Tokens run again under new weights after an update cut into answers (the embedded engine counts those it
    re-prefills; vLLM computes its kept requests again too but does not count them: None)."""
    cached_prompt_tokens: Optional[int] = None
    """Prompt tokens not prefilled: their keys and values were kept from the episode's call before (the embedded
    engine's prefix cache; None where not counted: vLLM, or the cache off)."""
    phases: Optional[PhaseTimes] = None
    """Where the sampling time went (the embedded engine; None: vLLM, which does not say)."""


def engine_metrics(before: EngineCounters, now: EngineCounters, seconds: float) -> dict[str, float]:
    """A step's engine figures from two readings `seconds` apart: the generated answers and their mean length
    (beside `partial/trained_answer_tokens_mean`: a bias towards short answers shows), and where the engine counts
    them its busy share of the step, the tokens it re-prefilled, the prompt tokens its prefix cache held and where
    its sampling time went (`engine/prefill_s`, `engine/decode_s`, ...: `PhaseTimes`)."""
    n, t = now.answers - before.answers, now.answer_tokens - before.answer_tokens
    out = {"partial/generated_answers": float(n), "partial/generated_answer_tokens_mean": t / n if n else 0.0}
    if now.busy_s is not None and seconds > 0:
        out["engine/busy_share"] = min(1.0, (now.busy_s - (before.busy_s or 0.0)) / seconds)
    if now.reprefilled_tokens is not None:
        out["partial/reprefilled_tokens"] = float(now.reprefilled_tokens - (before.reprefilled_tokens or 0))
    if now.cached_prompt_tokens is not None:
        out["engine/cached_prompt_tokens"] = float(now.cached_prompt_tokens - (before.cached_prompt_tokens or 0))
    if now.phases is not None:
        was = before.phases or PhaseTimes()
        out.update({f"engine/{k}": float(v - getattr(was, k)) for k, v in vars(now.phases).items()})
    return out


@dataclass(frozen=True)
class ServedWeights:
    """What a session's engines start serving: the model folder, the loaded policy and its tokenizer, and the step
    whose weights they are (the policy version the engines report)."""

    path: str
    """The model folder (vLLM loads it; the embedded engine serves `model` itself)."""
    model: PolicyModel
    """The loaded policy (the embedded engine generates with it; vLLM takes its adapter or weights from it)."""
    tokenizer: Tokenizer
    """The policy's tokenizer."""
    step: int
    """The training step the weights are at."""


@dataclass(frozen=True)
class SessionPlace:
    """What a training session trains and where: the same for every backend."""

    job: AgentJetJob
    """The job it trains."""
    run_id: int
    """The store's run id when it opened (another synced job means another run)."""
    store: Store
    """The experiment's store."""
    exp_dir: Path
    """The experiment folder (checkpoints, metrics, the job's YAML)."""
    store_outage_s: float
    """How long a step's record waits for a store that is away, the updated model kept (`until_stored`)."""

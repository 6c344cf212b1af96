"""Episode -> training samples (pure functions, tested alone).

Rules (DESIGN.md): an episode is all its LLM calls, and they form a tree of sequences (`ajet_store.sequences`,
shared with the explorer, which shows what was trained): completion tokens are trained (mask 1), tokens the agent
or tools inserted are not (mask 0), each sequence's start counted with its cause. Truncation is explicit and
counted.

A turn the server's cap cut (`CallRecord.truncated`) trains by the job's `overlong` rule: `keep` (as any turn),
`mask` (its tokens get mask 0; its episode keeps its reward in the GRPO group, with no sequence of its own when
nothing else of it is trained: DAPO's overlong filtering) or `zero_reward` (its episode's reward becomes 0.0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from ajet.job import Overlong
from ajet_core.labels import Label
from ajet_store.sequences import episode_sequences
from ajet_store.types import PoolEpisode
from ajet_trainer.types import AssemblyStats, EpisodeSample, TrainSequence


def truncate(seq: TrainSequence, max_prompt: int, max_response: int) -> tuple[TrainSequence, bool, bool]:
    """Cut the prompt from the left and the response from the right; returns (seq, cut_prompt, cut_resp)."""
    cut_p = len(seq.prompt_ids) > max_prompt
    cut_r = len(seq.response_ids) > max_response
    if not (cut_p or cut_r):
        return seq, False, False
    return (
        replace(
            seq,
            prompt_ids=seq.prompt_ids[-max_prompt:],
            response_ids=seq.response_ids[:max_response],
            response_mask=seq.response_mask[:max_response],
            rollout_logprobs=seq.rollout_logprobs[:max_response],
        ),
        cut_p,
        cut_r,
    )


@dataclass
class _Counts:
    """What `assemble` counts as it goes (becomes the step's `AssemblyStats`)."""

    calls: int = 0
    merged: int = 0
    failed: int = 0
    empty: int = 0
    cut_prompt: int = 0
    cut_response: int = 0
    sequences: int = 0
    tokens: int = 0
    trained: int = 0
    truncated: int = 0
    gone: int = 0
    masked: int = 0
    zeroed: int = 0
    answer_tokens: int = 0
    mixed: int = 0
    labels: Counter[str] = field(default_factory=Counter)
    starts: Counter[str] = field(default_factory=Counter)

    def stats(self, episodes: int) -> AssemblyStats:
        return AssemblyStats(
            episodes=episodes,
            sequences=self.sequences,
            calls=self.calls,
            merged_calls=self.merged,
            failed_calls=self.failed,
            empty_episodes=self.empty,
            prompt_truncated=self.cut_prompt,
            response_truncated=self.cut_response,
            tokens=self.tokens,
            trained_tokens=self.trained,
            labels=tuple(sorted(self.labels.items())),
            starts=tuple(sorted(self.starts.items())),
            truncated_calls=self.truncated,
            client_gone_calls=self.gone,
            overlong_masked_episodes=self.masked,
            overlong_zeroed_episodes=self.zeroed,
            answer_tokens=self.answer_tokens,
            mixed_version_calls=self.mixed,
        )


def assemble(
    episodes: Sequence[PoolEpisode], max_prompt: int, max_response: int, overlong: Overlong = "keep"
) -> tuple[list[EpisodeSample], AssemblyStats]:
    """Rewarded episodes -> samples, with what was skipped or cut counted.

    A sequence left without any trained token (all mask 0) is dropped; an episode without sequences
    is skipped and counted in `empty_episodes`, unless the `mask` rule emptied it (it then stays, with no
    sequence, so that its reward counts in its group). Truncated turns train by `overlong` (module docstring).
    Every sequence of an episode gets the episode's reward (and later its advantage).
    """
    out: list[EpisodeSample] = []
    n = _Counts()
    for ep in episodes:
        sample = _episode_sample(ep, max_prompt, max_response, overlong, n)
        if sample is not None:
            out.append(sample)
    return out, n.stats(len(out))


def _episode_sample(
    ep: PoolEpisode, max_prompt: int, max_response: int, overlong: Overlong, n: _Counts
) -> Optional[EpisodeSample]:
    """One episode's sample (None: nothing of it trains, and it does not count in its group), counted into `n`."""
    calls, reward = ep.calls, ep.reward
    n.calls += len(calls)
    n.failed += sum(1 for c in calls if c.error is not None)
    n.gone += sum(1 for c in calls if c.client_gone)
    n.labels.update(c.token_history or Label.UNLABELLED for c in calls if c.trainable)
    n.answer_tokens += sum(len(c.completion_ids or ()) for c in calls if c.trainable)
    n.mixed += sum(1 for c in calls if c.trainable and len(c.version_spans or ()) > 1)
    truncated = sum(1 for c in calls if c.trainable and c.truncated)
    n.truncated += truncated
    if truncated and overlong == "zero_reward":
        reward, n.zeroed = 0.0, n.zeroed + 1
    seqs, merged, starts = episode_sequences(calls, ep.uuid, ep.task_id, mask_truncated=overlong == "mask")
    n.merged += merged
    n.starts.update(starts)
    kept = []
    for seq in seqs:
        seq, cut_prompt, cut_response = truncate(seq, max_prompt, max_response)
        n.cut_prompt += cut_prompt
        n.cut_response += cut_response
        if any(seq.response_mask):
            kept.append(seq)
    if not kept and truncated and overlong == "mask":  # trains nothing, but its reward counts in its group
        n.masked += 1
        return EpisodeSample(ep.uuid, ep.task_id, float(reward), ())
    if not kept:
        n.empty += 1
        return None
    n.sequences += len(kept)
    n.tokens += sum(len(s.prompt_ids) + len(s.response_ids) for s in kept)
    n.trained += sum(sum(s.response_mask) for s in kept)
    return EpisodeSample(ep.uuid, ep.task_id, float(reward), tuple(kept))


def canonical_order(samples: Sequence[EpisodeSample]) -> list[EpisodeSample]:
    """The samples in an order that depends on their content only (task, reward, tokens), not on when their
    episodes ended: the same batch then makes the same update, bit for bit, so a seeded run repeats."""
    return sorted(
        samples,
        key=lambda e: (
            e.task_id,
            e.reward,
            tuple((s.prompt_ids, s.response_ids, s.response_mask, s.rollout_logprobs) for s in e.sequences),
        ),
    )


def has_tokens(samples: Sequence[EpisodeSample]) -> bool:
    """Whether any sample has a sequence to train (an episode the `mask` rule emptied has none)."""
    return any(s.sequences for s in samples)


def flatten(
    samples: Sequence[EpisodeSample], advantages: Optional[dict[str, float]] = None
) -> list[tuple[TrainSequence, float]]:
    """Every sequence with its episode's advantage (0.0 when none is given)."""
    adv = advantages or {}
    return [(s, adv.get(ep.episode_uuid, 0.0)) for ep in samples for s in ep.sequences]

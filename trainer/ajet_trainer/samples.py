"""Episode -> training sequences (pure functions, tested alone).

Rules (DESIGN.md): an episode is all its LLM calls, and they form a tree: a call joins the sequence whose prompt +
completion ids its prompt starts with (the longest such), so several conversations in one episode (two agents taking
turns, parallel calls, branches, a compacted history) each train as their own sequence; otherwise a new sequence
starts, counted with its cause (`episode_sequences`). Completion tokens are trained (mask 1); tokens the agent or
tools inserted are not (mask 0). Only the engine's token ids are used — text is never re-tokenised. Truncation is
explicit and counted.

A turn the server's cap cut (`CallRecord.truncated`) trains by the job's `overlong` rule: `keep` (as any turn),
`mask` (its tokens get mask 0; its episode keeps its reward in the GRPO group, with no sequence of its own when
nothing else of it is trained: DAPO's overlong filtering) or `zero_reward` (its episode's reward becomes 0.0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from ajet.job import Overlong
from ajet_store.types import CallRecord, RewardedEpisode
from ajet_trainer.types import AssemblyStats, EpisodeSample, TrainSequence

FIRST = "first"
"""The cause of an episode's first sequence."""
BRANCH = "branch"
"""The cause of a sequence whose first call continues an earlier call that another call continued already (parallel
calls, branches): its prompt holds that turn, untrained here (it is trained once, in the other sequence)."""
UNMATCHED = "unmatched"
"""The cause of a sequence whose first call the proxy built on an earlier turn, but whose ids do not continue it (a
store written by an older proxy, or a cut)."""
UNLABELLED = "unlabelled"
"""The label of calls logged before the proxy labelled them."""


class _Builder:
    """A sequence being grown by the calls that continue its last one."""

    def __init__(self, call: CallRecord, mask_truncated: bool):
        self.prompt = list(call.prompt_ids or [])
        self.resp: list[int] = []
        self.mask: list[int] = []
        self.lps: list[float] = []
        self.calls = 0
        self.mask_truncated = mask_truncated
        self.add_completion(call)

    def full(self) -> list[int]:
        return self.prompt + self.resp

    def add_completion(self, call: CallRecord) -> None:
        ids = list(call.completion_ids or [])
        lps = list(call.logprobs) if call.logprobs is not None and len(call.logprobs) == len(ids) else [0.0] * len(ids)
        self.resp += ids
        self.mask += [0 if call.truncated and self.mask_truncated else 1] * len(ids)
        self.lps += lps
        self.calls += 1

    def extend(self, call: CallRecord, at: int) -> None:
        """Add `call`, whose prompt continues this sequence's ids up to `at`: the tokens in between are masked."""
        inserted = list(call.prompt_ids or [])[at:]
        self.resp += inserted
        self.mask += [0] * len(inserted)
        self.lps += [0.0] * len(inserted)
        self.add_completion(call)

    def build(self, episode_uuid: str, task_id: str) -> TrainSequence:
        return TrainSequence(
            episode_uuid, task_id, tuple(self.prompt), tuple(self.resp), tuple(self.mask), tuple(self.lps), self.calls
        )


def _continues(prompt: Sequence[int], full: Sequence[int]) -> bool:
    """Whether a prompt starts with a call's prompt + completion ids."""
    return len(prompt) >= len(full) and list(prompt[: len(full)]) == list(full)


def _start_cause(call: CallRecord, continued_earlier: bool, first: bool) -> str:
    """Why a call starts a new sequence: a branch from a turn already continued, else the proxy's label (what it
    did with the call's history), else `first`; `unmatched` when the proxy built it on a turn its ids do not
    continue."""
    if continued_earlier:
        return BRANCH
    label = call.token_history or UNLABELLED
    if label == "extended":
        return UNMATCHED
    return FIRST if first and label in (FIRST, UNLABELLED, "rendered") else label


def episode_sequences(
    calls: Sequence[CallRecord], episode_uuid: str, task_id: str, mask_truncated: bool = False
) -> tuple[list[TrainSequence], int, Counter[str]]:
    """The sequences of one episode's calls (in `seq` order), along the tree of its conversations: a call joins the
    sequence whose ids its prompt continues (the longest), else it starts one. Returns (sequences, calls merged,
    why each sequence started). `mask_truncated`: a truncated call's completion tokens get mask 0."""
    builders: list[_Builder] = []
    fulls: list[list[int]] = []
    merged, starts = 0, Counter[str]()
    for call in sorted(calls, key=lambda c: c.seq):
        if not call.trainable:
            continue
        prompt = call.prompt_ids or []
        open_ends = [(len(f), b) for b in builders if _continues(prompt, f := b.full())]
        if open_ends:
            at, builder = max(open_ends, key=lambda end: end[0])
            builder.extend(call, at)
            merged += 1
        else:
            continued = any(_continues(prompt, f) for f in fulls)
            starts[_start_cause(call, continued, not builders)] += 1
            builders.append(_Builder(call, mask_truncated))
        fulls.append([*prompt, *(call.completion_ids or [])])
    return [b.build(episode_uuid, task_id) for b in builders], merged, starts


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
        )


def assemble(
    episodes: Sequence[RewardedEpisode], max_prompt: int, max_response: int, overlong: Overlong = "keep"
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
    ep: RewardedEpisode, max_prompt: int, max_response: int, overlong: Overlong, n: _Counts
) -> Optional[EpisodeSample]:
    """One episode's sample (None: nothing of it trains, and it does not count in its group), counted into `n`."""
    calls, reward = ep.calls, ep.reward
    n.calls += len(calls)
    n.failed += sum(1 for c in calls if c.error is not None)
    n.gone += sum(1 for c in calls if c.client_gone)
    n.labels.update(c.token_history or UNLABELLED for c in calls if c.trainable)
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

"""Episode -> training sequences (pure functions, tested alone).

Rules (DESIGN.md): an episode is all its LLM calls, in order. Calls merge into one sequence while
the next call's prompt ids start with the previous prompt + completion ids; otherwise a new sequence
starts. Completion tokens are trained (mask 1); tokens the agent or tools inserted are not (mask 0).
Only the engine's token ids are used — text is never re-tokenised. Truncation is explicit and counted.

A turn the server's cap cut (`CallRecord.truncated`) trains by the job's `overlong` rule: `keep` (as any turn),
`mask` (its tokens get mask 0; its episode keeps its reward in the GRPO group, with no sequence of its own when
nothing else of it is trained: DAPO's overlong filtering) or `zero_reward` (its episode's reward becomes 0.0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Optional, Sequence

from ajet.job import Overlong
from ajet_store.types import CallRecord, RewardedEpisode
from ajet_trainer.types import AssemblyStats, EpisodeSample, TrainSequence


class _Builder:
    """A sequence being grown by merged calls."""

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

    def try_merge(self, call: CallRecord) -> bool:
        full = self.full()
        prompt = list(call.prompt_ids or [])
        if len(prompt) < len(full) or prompt[: len(full)] != full:
            return False
        inserted = prompt[len(full) :]
        self.resp += inserted
        self.mask += [0] * len(inserted)
        self.lps += [0.0] * len(inserted)
        self.add_completion(call)
        return True

    def build(self, episode_uuid: str, task_id: str) -> TrainSequence:
        return TrainSequence(
            episode_uuid, task_id, tuple(self.prompt), tuple(self.resp), tuple(self.mask), tuple(self.lps), self.calls
        )


def episode_sequences(
    calls: Sequence[CallRecord], episode_uuid: str, task_id: str, mask_truncated: bool = False
) -> tuple[list[TrainSequence], int]:
    """The sequences of one episode's calls (in `seq` order); returns (sequences, merged call count).
    `mask_truncated`: a truncated call's completion tokens get mask 0."""
    builders: list[_Builder] = []
    merged = 0
    for call in sorted(calls, key=lambda c: c.seq):
        if not call.trainable:
            continue
        if builders and builders[-1].try_merge(call):
            merged += 1
        else:
            builders.append(_Builder(call, mask_truncated))
    return [b.build(episode_uuid, task_id) for b in builders], merged


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


def assemble(
    episodes: Sequence[RewardedEpisode], max_prompt: int, max_response: int, overlong: Overlong = "keep"
) -> tuple[list[EpisodeSample], AssemblyStats]:
    """Rewarded episodes -> samples, with what was skipped or cut counted.

    A sequence left without any trained token (all mask 0) is dropped; an episode without sequences
    is skipped and counted in `empty_episodes`, unless the `mask` rule emptied it (it then stays, with no
    sequence, so that its reward counts in its group). Truncated turns train by `overlong` (module docstring).
    """
    out: list[EpisodeSample] = []
    st = {"calls": 0, "merged": 0, "failed": 0, "empty": 0, "cut_p": 0, "cut_r": 0, "seqs": 0, "pairs": 0}
    st.update(tokens=0, trained=0, truncated=0, gone=0, masked=0, zeroed=0)
    labels: Counter[str] = Counter()
    for ep in episodes:
        uuid, task_id, reward, calls = ep.uuid, ep.task_id, ep.reward, ep.calls
        st["calls"] += len(calls)
        st["failed"] += sum(1 for c in calls if c.error is not None)
        st["gone"] += sum(1 for c in calls if c.client_gone)
        st["pairs"] += max(0, sum(1 for c in calls if c.trainable) - 1)
        labels.update(c.token_history or "unlabelled" for c in calls if c.trainable)
        truncated = sum(1 for c in calls if c.trainable and c.truncated)
        st["truncated"] += truncated
        if truncated and overlong == "zero_reward":
            reward, st["zeroed"] = 0.0, st["zeroed"] + 1
        seqs, merged = episode_sequences(calls, uuid, task_id, mask_truncated=overlong == "mask")
        st["merged"] += merged
        kept = []
        for s in seqs:
            s, cut_p, cut_r = truncate(s, max_prompt, max_response)
            st["cut_p"] += cut_p
            st["cut_r"] += cut_r
            if any(s.response_mask):
                kept.append(s)
        if not kept and truncated and overlong == "mask":  # trains nothing, but its reward counts in its group
            st["masked"] += 1
            out.append(EpisodeSample(uuid, task_id, float(reward), ()))
            continue
        if not kept:
            st["empty"] += 1
            continue
        st["seqs"] += len(kept)
        st["tokens"] += sum(len(s.prompt_ids) + len(s.response_ids) for s in kept)
        st["trained"] += sum(sum(s.response_mask) for s in kept)
        out.append(EpisodeSample(uuid, task_id, float(reward), tuple(kept)))
    return out, AssemblyStats(
        episodes=len(out),
        sequences=st["seqs"],
        calls=st["calls"],
        merged_calls=st["merged"],
        failed_calls=st["failed"],
        empty_episodes=st["empty"],
        prompt_truncated=st["cut_p"],
        response_truncated=st["cut_r"],
        turn_pairs=st["pairs"],
        tokens=st["tokens"],
        trained_tokens=st["trained"],
        labels=tuple(sorted(labels.items())),
        truncated_calls=st["truncated"],
        client_gone_calls=st["gone"],
        overlong_masked_episodes=st["masked"],
        overlong_zeroed_episodes=st["zeroed"],
    )


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

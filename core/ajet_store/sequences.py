"""An episode's calls -> its sequences (pure): the tree its conversations form, shared by the trainer (what it
trains) and the explorer (what it shows was trained).

A call joins the sequence whose prompt + completion ids its prompt starts with (the longest such), so several
conversations in one episode (two agents taking turns, parallel calls, branches, a compacted history) each train
as their own sequence; otherwise a new sequence starts, with its cause. Completion tokens are trained (mask 1);
tokens the agent or tools inserted between calls are not (mask 0). Only the engine's token ids are used: text is
never re-tokenised.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ajet_core.labels import Label
from ajet_store.types import CallRecord, TrainSequence

FIRST = Label.FIRST
"""The cause of an episode's first sequence (its first call's label)."""
BRANCH = "branch"
"""The cause of a sequence whose first call continues an earlier call that another call continued already (parallel
calls, branches): its prompt holds that turn, untrained here (it is trained once, in the other sequence)."""
UNMATCHED = "unmatched"
"""The cause of a sequence whose first call the proxy built on an earlier turn, but whose ids do not continue it (a
store written by an older proxy, or a cut)."""


@dataclass(frozen=True)
class Span:
    """A run of a sequence's response tokens from one call: its answer (trained) or what was inserted before it."""

    start: int
    """Offset of its first token in the sequence's response."""
    end: int
    """Offset past its last token."""
    call_seq: int
    """The call it belongs to (an inserted run: the call whose prompt inserted it)."""
    trained: bool
    """True for the call's completion (mask 1, unless a truncated turn was masked); False for inserted tokens."""
    policy_version: int
    """The policy version that sampled these tokens (an inserted run: the version that served its call)."""


@dataclass(frozen=True)
class BuiltSequence:
    """One sequence with how it was built: what the explorer shows of a trained sequence."""

    sequence: TrainSequence
    """The tokens, mask and logprobs the trainer gets (before its length limits cut them)."""
    cause: str
    """Why it started (`first`, `branch`, `unmatched`, or the proxy's token-history label: a fallback reason)."""
    spans: tuple[Span, ...]
    """Its response in runs, each from one call, in order."""


class _Builder:
    """A sequence being grown by the calls that continue its last one."""

    def __init__(self, call: CallRecord, mask_truncated: bool, cause: str):
        self.prompt = list(call.prompt_ids or [])
        self.resp: list[int] = []
        self.mask: list[int] = []
        self.lps: list[float] = []
        self.spans: list[Span] = []
        self.calls = 0
        self.images: tuple[str, ...] = ()
        """The latest merged call's images: its prompt holds every image of the sequence."""
        self.mask_truncated, self.cause = mask_truncated, cause
        self.add_completion(call)

    def full(self) -> list[int]:
        return self.prompt + self.resp

    def add_completion(self, call: CallRecord) -> None:
        ids = list(call.completion_ids or [])
        lps = list(call.logprobs) if call.logprobs is not None and len(call.logprobs) == len(ids) else [0.0] * len(ids)
        trained = not (call.truncated and self.mask_truncated)
        self._span(call, len(ids), trained)
        self.resp += ids
        self.mask += [1 if trained else 0] * len(ids)
        self.lps += lps
        self.calls += 1
        self.images = tuple(i.sha256 for i in call.images or ())

    def extend(self, call: CallRecord, at: int) -> None:
        """Add `call`, whose prompt continues this sequence's ids up to `at`: the tokens in between are masked."""
        inserted = list(call.prompt_ids or [])[at:]
        self._span(call, len(inserted), False)
        self.resp += inserted
        self.mask += [0] * len(inserted)
        self.lps += [0.0] * len(inserted)
        self.add_completion(call)

    def _span(self, call: CallRecord, n: int, trained: bool) -> None:
        """The next `n` response tokens, from `call`: its inserted turn (one span) or its answer, one span per
        policy version that sampled it (an update mid-answer splits it)."""
        start = len(self.resp)
        cuts = [a for a, _ in call.version_spans or () if 0 < a < n] if trained else []
        for a, b in zip([0, *cuts], [*cuts, n]):
            if b > a:
                version = call.version_at(a) if trained else call.policy_version
                self.spans.append(Span(start + a, start + b, call.seq, trained, version))

    def build(self, episode_uuid: str, task_id: str) -> BuiltSequence:
        seq = TrainSequence(
            episode_uuid, task_id, tuple(self.prompt), tuple(self.resp), tuple(self.mask), tuple(self.lps), self.calls,
            self.images,
        )  # fmt: skip
        return BuiltSequence(seq, self.cause, tuple(self.spans))


def _continues(prompt: Sequence[int], full: Sequence[int]) -> bool:
    """Whether a prompt starts with a call's prompt + completion ids."""
    return len(prompt) >= len(full) and list(prompt[: len(full)]) == list(full)


def _start_cause(call: CallRecord, continued_earlier: bool, first: bool) -> str:
    """Why a call starts a new sequence: a branch from a turn already continued, else the proxy's label (what it
    did with the call's history), else `first`; `unmatched` when the proxy built it on a turn its ids do not
    continue."""
    if continued_earlier:
        return BRANCH
    label = call.token_history or Label.UNLABELLED
    if label == Label.EXTENDED:
        return UNMATCHED
    return FIRST if first and label in (Label.FIRST, Label.UNLABELLED, Label.RENDERED) else label


def built_sequences(
    calls: Sequence[CallRecord], episode_uuid: str, task_id: str, mask_truncated: bool = False
) -> tuple[list[BuiltSequence], int]:
    """The sequences of one episode's calls (in `seq` order), along the tree of its conversations: a call joins the
    sequence whose ids its prompt continues (the longest), else it starts one. Returns (sequences, calls merged).
    `mask_truncated`: a truncated call's completion tokens get mask 0."""
    builders: list[_Builder] = []
    fulls: list[list[int]] = []
    merged = 0
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
            cause = _start_cause(call, any(_continues(prompt, f) for f in fulls), not builders)
            builders.append(_Builder(call, mask_truncated, cause))
        fulls.append([*prompt, *(call.completion_ids or [])])
    return [b.build(episode_uuid, task_id) for b in builders], merged


def episode_sequences(
    calls: Sequence[CallRecord], episode_uuid: str, task_id: str, mask_truncated: bool = False
) -> tuple[list[TrainSequence], int, Counter[str]]:
    """`built_sequences` as the trainer takes them: (sequences, calls merged, why each sequence started)."""
    built, merged = built_sequences(calls, episode_uuid, task_id, mask_truncated)
    return [b.sequence for b in built], merged, Counter(b.cause for b in built)

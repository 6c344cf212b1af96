"""The sequence tree's spans: which call each run of response tokens came from, trained or inserted, and each
sequence's cause (what the explorer draws beside the trainer's sequences)."""

from __future__ import annotations

from ajet_store.sequences import BRANCH, FIRST, Span, built_sequences, episode_sequences
from ajet_store.types import CallRecord


def call(seq: int, prompt: list[int], answer: list[int], version: int = 0, truncated: bool = False) -> CallRecord:
    return CallRecord("e", seq, "{}", "{}", prompt, answer, [-1.0] * len(answer), "stop", version, "x", 1.0, 0.0,
                      token_history="first", truncated=truncated)  # fmt: skip


def test_spans_follow_the_calls_and_the_inserted_tokens():
    calls = [call(0, [1, 2], [3, 4]), call(1, [1, 2, 3, 4, 9, 9], [5], version=1)]
    (built,), merged = built_sequences(calls, "e", "t")
    assert merged == 1 and built.cause == FIRST
    assert built.spans == (Span(0, 2, 0, True, 0), Span(2, 4, 1, False, 1), Span(4, 5, 1, True, 1))
    assert built.sequence.response_mask == (1, 1, 0, 0, 1)


def test_a_branch_is_its_own_sequence_with_its_cause_and_a_masked_cut_turn_is_untrained():
    calls = [call(0, [1], [2]), call(1, [1, 2, 7], [3]), call(2, [1, 2, 8], [4], truncated=True)]
    built, _ = built_sequences(calls, "e", "t", mask_truncated=True)
    assert [b.cause for b in built] == [FIRST, BRANCH]
    assert built[1].spans == (Span(0, 1, 2, False, 0),) and built[1].sequence.response_mask == (0,)
    seqs, merged, starts = episode_sequences(calls, "e", "t", mask_truncated=True)
    assert [s.response_ids for s in seqs] == [b.sequence.response_ids for b in built] and starts[BRANCH] == 1


def test_an_answer_two_versions_sampled_is_two_spans():
    straddled = CallRecord("e", 0, "{}", "{}", [1], [5, 6, 7, 8], [-1.0] * 4, "stop", 3, "x", 1.0, 0.0,
                           version_spans=[(0, 3), (2, 4)])  # fmt: skip
    (built,), _ = built_sequences([straddled], "e", "t")
    assert built.spans == (Span(0, 2, 0, True, 3), Span(2, 4, 0, True, 4))
    assert [straddled.version_at(i) for i in range(4)] == [3, 3, 4, 4]

"""Sample assembly on hand-made episodes: merging, masks, non-prefix turns, truncation, skips."""

from ajet_store.types import CallRecord, RewardedEpisode
from ajet_trainer.samples import assemble, episode_sequences


def call(seq, prompt, completion, logprobs=None, error=None):
    lps = logprobs if logprobs is not None else [-0.1 * (i + 1) for i in range(len(completion or []))]
    return CallRecord(
        "ep",
        seq,
        "{}",
        "{}",
        prompt,
        completion,
        lps if completion is not None else None,
        "stop",
        0,
        "d",
        1.0,
        1.0,
        error=error,
    )


def test_multi_turn_with_tool_output_merges():
    # turn 1: prompt [1,2,3] -> [10,11]; tool output [50,51] inserted; turn 2 -> [12]
    calls = [call(0, [1, 2, 3], [10, 11]), call(1, [1, 2, 3, 10, 11, 50, 51], [12])]
    seqs, merged = episode_sequences(calls, "ep", "t")
    assert merged == 1 and len(seqs) == 1
    s = seqs[0]
    assert s.prompt_ids == (1, 2, 3)
    assert s.response_ids == (10, 11, 50, 51, 12)
    assert s.response_mask == (1, 1, 0, 0, 1)
    assert s.rollout_logprobs == (-0.1, -0.2, 0.0, 0.0, -0.1)
    assert s.num_calls == 2


def test_non_prefix_turn_starts_a_new_sequence():
    calls = [call(0, [1, 2], [3]), call(1, [1, 9, 9], [4]), call(2, [1, 9, 9, 4, 7], [5])]
    seqs, merged = episode_sequences(calls, "ep", "t")
    assert [s.prompt_ids for s in seqs] == [(1, 2), (1, 9, 9)]
    assert seqs[1].response_ids == (4, 7, 5) and seqs[1].response_mask == (1, 0, 1) and merged == 1


def test_calls_are_ordered_by_seq_and_bad_calls_skipped():
    calls = [call(1, [1, 2, 3, 4], [5]), call(0, [1, 2], [3]), call(2, [1], None), call(3, [9], [8], error="boom")]
    seqs, _ = episode_sequences(calls, "ep", "t")
    assert len(seqs) == 1 and seqs[0].response_ids == (3, 4, 5) and seqs[0].response_mask == (1, 0, 1)


def test_truncation_is_explicit_and_counted():
    eps = [
        RewardedEpisode("e1", "t", 1.0, (call(0, list(range(10)), [20, 21, 22, 23]),)),
        RewardedEpisode("e2", "t", 0.0, (call(0, [1], [2]),)),
    ]
    samples, stats = assemble(eps, max_prompt=4, max_response=2)
    s = samples[0].sequences[0]
    assert s.prompt_ids == (6, 7, 8, 9) and s.response_ids == (20, 21) and len(s.rollout_logprobs) == 2
    assert (stats.prompt_truncated, stats.response_truncated, stats.episodes, stats.sequences) == (1, 1, 2, 2)


def test_episode_without_usable_calls_is_skipped_and_counted():
    eps = [
        RewardedEpisode("e1", "t", 1.0, (call(0, [1], None),)),
        RewardedEpisode("e2", "t", 0.0, (call(0, [1], [2], error="x"),)),
        RewardedEpisode("e3", "t", 1.0, (call(0, [1], [2]),)),
    ]
    samples, stats = assemble(eps, 100, 100)
    assert [s.episode_uuid for s in samples] == ["e3"]
    assert (stats.empty_episodes, stats.failed_calls, stats.calls) == (2, 1, 3)


def test_the_assembly_counts_the_token_history_for_the_steps_metrics():
    """Labels, merge rate over turn pairs, sequences and tokens per episode (`AssemblyStats.metrics`)."""
    from ajet_store.types import CallRecord, RewardedEpisode

    def call(seq: int, prompt: list[int], completion: list[int], label: str) -> CallRecord:
        return CallRecord("e", seq, "{}", "{}", prompt, completion, [0.0] * len(completion), "stop", 0, "d", 1.0, 0.0,
                          token_history=label)  # fmt: skip

    one = [
        call(0, [1, 2], [3], "first"),
        call(1, [1, 2, 3, 4], [5], "extended"),
        call(2, [9], [8], "fallback:history_edited"),
    ]
    _, stats = assemble([RewardedEpisode("e", "t", 1.0, tuple(one))], 100, 100)
    m = stats.metrics()
    assert (stats.turn_pairs, stats.merged_calls, stats.sequences) == (2, 1, 2)
    assert m["history/merge_rate"] == 0.5 and m["history/sequences_per_episode"] == 2
    assert m["history/tokens_per_episode"] == (2 + 3) + (1 + 1) and m["history/trained_tokens_per_episode"] == 3
    assert m["history/extended"] == 1 and m["history/fallbacks"] == 1 and m["history/fallback/history_edited"] == 1
    assert m["samples/calls"] == 3 and "samples/labels" not in m
    _, none = assemble([], 100, 100)
    assert none.metrics()["history/merge_rate"] == 1.0  # no pairs: nothing failed to merge

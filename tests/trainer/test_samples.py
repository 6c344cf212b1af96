"""Sample assembly on hand-made episodes: the tree of an episode's conversations (merging, branches, several agents),
masks, why each sequence starts (a test per cause), truncation, skips."""

from ajet_store.types import CallRecord, PoolEpisode
from ajet_trainer.samples import assemble, episode_sequences


def call(seq, prompt, completion, logprobs=None, error=None, label=None):
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
        token_history=label,
    )


def test_multi_turn_with_tool_output_merges():
    # turn 1: prompt [1,2,3] -> [10,11]; tool output [50,51] inserted; turn 2 -> [12]
    calls = [call(0, [1, 2, 3], [10, 11]), call(1, [1, 2, 3, 10, 11, 50, 51], [12])]
    seqs, merged, starts = episode_sequences(calls, "ep", "t")
    assert merged == 1 and len(seqs) == 1 and starts == {"first": 1}
    s = seqs[0]
    assert s.prompt_ids == (1, 2, 3)
    assert s.response_ids == (10, 11, 50, 51, 12)
    assert s.response_mask == (1, 1, 0, 0, 1)
    assert s.rollout_logprobs == (-0.1, -0.2, 0.0, 0.0, -0.1)
    assert s.num_calls == 2


def test_a_call_that_continues_nothing_starts_a_sequence_with_the_proxys_cause():
    calls = [
        call(0, [1, 2], [3]),
        call(1, [1, 9, 9], [4], label="fallback:history_edited"),
        call(2, [1, 9, 9, 4, 7], [5]),
    ]
    seqs, merged, starts = episode_sequences(calls, "ep", "t")
    assert [s.prompt_ids for s in seqs] == [(1, 2), (1, 9, 9)]
    assert seqs[1].response_ids == (4, 7, 5) and seqs[1].response_mask == (1, 0, 1) and merged == 1
    assert starts == {"first": 1, "fallback:history_edited": 1}


def test_two_agents_taking_turns_give_two_sequences_every_other_call_merged():
    """A1 B1 A2 B2 A3 B3: each call continues its own agent's last, not the episode's last call."""
    a1, b1 = call(0, [1, 2], [3], label="first"), call(1, [7, 8], [9], label="segment:new_conversation")
    a2, b2 = call(2, [1, 2, 3, 4], [5], label="extended"), call(3, [7, 8, 9, 6], [6], label="extended")
    a3, b3 = call(4, [1, 2, 3, 4, 5, 4], [5], label="extended"), call(5, [7, 8, 9, 6, 6, 6], [6], label="extended")
    seqs, merged, starts = episode_sequences([a1, b1, a2, b2, a3, b3], "ep", "t")
    assert [s.prompt_ids for s in seqs] == [(1, 2), (7, 8)] and merged == 4
    assert [s.num_calls for s in seqs] == [3, 3] and starts == {"first": 1, "segment:new_conversation": 1}
    assert seqs[0].response_mask == (1, 0, 1, 0, 1)


def test_branches_give_one_sequence_each_and_the_shared_turn_trains_once():
    root = call(0, [1, 2], [3], label="first")
    left, right = call(1, [1, 2, 3, 4], [5], label="extended"), call(2, [1, 2, 3, 6], [7], label="extended")
    deeper_right = call(3, [1, 2, 3, 6, 7, 8], [9], label="extended")
    seqs, merged, starts = episode_sequences([root, left, right, deeper_right], "ep", "t")
    assert [(s.prompt_ids, s.response_ids, s.response_mask) for s in seqs] == [
        ((1, 2), (3, 4, 5), (1, 0, 1)),
        ((1, 2, 3, 6), (7, 8, 9), (1, 0, 1)),  # the root's answer is in this branch's prompt: trained once
    ]
    assert merged == 2 and starts == {"first": 1, "branch": 1}


def test_a_compaction_is_a_new_segment_and_an_unmatched_extension_is_named():
    calls = [call(0, [1, 2], [3], label="first"), call(1, [1, 5], [6], label="segment:compacted")]
    calls.append(call(2, [1, 5, 6, 2], [7], label="extended"))
    calls.append(call(3, [1, 2, 3, 9, 9], [7], label="extended"))  # the first conversation goes on too
    calls.append(call(4, [4, 4], [4], label="extended"))  # the proxy built it on a turn its ids do not continue
    seqs, merged, starts = episode_sequences(calls, "ep", "t")
    assert len(seqs) == 3 and merged == 2
    assert starts == {"first": 1, "segment:compacted": 1, "unmatched": 1}


def test_calls_logged_before_labels_and_rendered_calls_start_with_their_cause():
    """A store written before the proxy labelled calls (`token_history` NULL): a call that continues nothing starts
    an `unlabelled` sequence, not a `first` one; under `token_history="rendered"` it is a `rendered` one."""
    for label, cause in ((None, "unlabelled"), ("rendered", "rendered")):
        calls = [call(0, [1, 2], [3], label=label), call(1, [1, 2, 3, 4], [5], label=label)]
        calls.append(call(2, [1, 2, 9, 9], [6], label=label))  # re-rendered history: its ids continue nothing
        seqs, merged, starts = episode_sequences(calls, "ep", "t")
        assert len(seqs) == 2 and merged == 1 and starts == {"first": 1, cause: 1}, (label, starts)


def test_calls_are_ordered_by_seq_and_bad_calls_skipped():
    calls = [call(1, [1, 2, 3, 4], [5]), call(0, [1, 2], [3]), call(2, [1], None), call(3, [9], [8], error="boom")]
    seqs, _, _ = episode_sequences(calls, "ep", "t")
    assert len(seqs) == 1 and seqs[0].response_ids == (3, 4, 5) and seqs[0].response_mask == (1, 0, 1)


def test_truncation_is_explicit_and_counted():
    eps = [
        PoolEpisode("e1", "t", 1.0, calls=(call(0, list(range(10)), [20, 21, 22, 23]),)),
        PoolEpisode("e2", "t", 0.0, calls=(call(0, [1], [2]),)),
    ]
    samples, stats = assemble(eps, max_prompt=4, max_response=2)
    s = samples[0].sequences[0]
    assert s.prompt_ids == (6, 7, 8, 9) and s.response_ids == (20, 21) and len(s.rollout_logprobs) == 2
    assert (stats.prompt_truncated, stats.response_truncated, stats.episodes, stats.sequences) == (1, 1, 2, 2)


def test_episode_without_usable_calls_is_skipped_and_counted():
    eps = [
        PoolEpisode("e1", "t", 1.0, calls=(call(0, [1], None),)),
        PoolEpisode("e2", "t", 0.0, calls=(call(0, [1], [2], error="x"),)),
        PoolEpisode("e3", "t", 1.0, calls=(call(0, [1], [2]),)),
    ]
    samples, stats = assemble(eps, 100, 100)
    assert [s.episode_uuid for s in samples] == ["e3"]
    assert (stats.empty_episodes, stats.failed_calls, stats.calls) == (2, 1, 3)


def test_the_assembly_counts_the_token_history_for_the_steps_metrics():
    """Labels, the merge rate over the calls that could have merged, why sequences started, sequences and tokens per
    episode (`AssemblyStats.metrics`)."""
    from ajet_store.types import CallRecord, PoolEpisode

    def call(seq: int, prompt: list[int], completion: list[int], label: str) -> CallRecord:
        return CallRecord("e", seq, "{}", "{}", prompt, completion, [0.0] * len(completion), "stop", 0, "d", 1.0, 0.0,
                          token_history=label)  # fmt: skip

    one = [
        call(0, [1, 2], [3], "first"),
        call(1, [1, 2, 3, 4], [5], "extended"),
        call(2, [9], [8], "fallback:history_edited"),
    ]
    _, stats = assemble([PoolEpisode("e", "t", 1.0, calls=tuple(one))], 100, 100)
    m = stats.metrics()
    assert (stats.missed_merges, stats.merged_calls, stats.sequences) == (1, 1, 2)
    assert m["history/merge_rate"] == 0.5 and m["history/sequences_per_episode"] == 2
    assert m["history/starts/fallback:history_edited"] == 1 and m["history/segments"] == 0
    assert m["history/tokens_per_episode"] == (2 + 3) + (1 + 1) and m["history/trained_tokens_per_episode"] == 3
    assert m["history/extended"] == 1 and m["history/fallbacks"] == 1 and m["history/fallback/history_edited"] == 1
    assert m["samples/calls"] == 3 and "samples/labels" not in m
    _, none = assemble([], 100, 100)
    assert none.metrics()["history/merge_rate"] == 1.0  # nothing could merge: nothing failed to
    agents = [call(0, [1], [2], label="first"), call(1, [5], [6], label="segment:new_conversation")]
    _, two = assemble([PoolEpisode("e", "t", 1.0, calls=tuple(agents))], 100, 100)
    assert two.metrics()["history/merge_rate"] == 1.0 and two.metrics()["history/segments"] == 1  # not a miss


def _episode(uuid, reward, *calls_):
    return PoolEpisode(uuid, "t", reward, calls=tuple(calls_))


def _cut(seq, prompt, completion):
    from dataclasses import replace

    return replace(call(seq, prompt, completion), finish_reason="length", truncated=True)


def test_overlong_keep_trains_a_truncated_turn_like_any_and_counts_it():
    ep = _episode("a", 1.0, call(0, [1], [2, 3]), _cut(1, [1, 2, 3, 9], [4, 5, 6]))
    (sample,), stats = assemble([ep], 100, 100, overlong="keep")
    assert sample.reward == 1.0 and sample.sequences[0].response_mask == (1, 1, 0, 1, 1, 1)
    assert stats.truncated_calls == 1 and stats.metrics()["samples/truncated_calls"] == 1.0


def test_overlong_mask_gives_the_truncated_turn_no_loss_and_keeps_the_rest():
    ep = _episode("a", 1.0, call(0, [1], [2, 3]), _cut(1, [1, 2, 3, 9], [4, 5, 6]))
    (sample,), stats = assemble([ep], 100, 100, overlong="mask")
    assert sample.reward == 1.0 and sample.sequences[0].response_mask == (1, 1, 0, 0, 0, 0)
    assert stats.truncated_calls == 1 and stats.trained_tokens == 2 and stats.overlong_masked_episodes == 0


def test_overlong_mask_keeps_an_emptied_episode_for_its_group_without_sequences():
    """DAPO's overlong filtering: the cut answer has no loss, but its reward still shapes its group's advantage."""
    from ajet_trainer.grpo import episode_advantages
    from ajet_trainer.samples import flatten, has_tokens

    eps = [_episode("cut", 0.0, _cut(0, [1], [2, 3])), _episode("ok", 1.0, call(0, [1], [4]))]
    samples, stats = assemble(eps, 100, 100, overlong="mask")
    assert [(s.episode_uuid, len(s.sequences)) for s in samples] == [("cut", 0), ("ok", 1)]
    assert stats.overlong_masked_episodes == 1 and stats.empty_episodes == 0 and has_tokens(samples)
    adv = episode_advantages(samples)
    assert adv["ok"] > 0 > adv["cut"]  # the group has two members: "ok" is better than the cut one
    assert [u.episode_uuid for u, _ in flatten(samples, adv)] == ["ok"]
    assert not has_tokens(samples[:1])  # a batch of such episodes alone has nothing to train (the update is skipped)


def test_overlong_zero_reward_zeroes_the_episode_and_trains_its_tokens():
    eps = [_episode("cut", 1.0, _cut(0, [1], [2, 3])), _episode("ok", 1.0, call(0, [1], [4]))]
    samples, stats = assemble(eps, 100, 100, overlong="zero_reward")
    assert [(s.episode_uuid, s.reward) for s in samples] == [("cut", 0.0), ("ok", 1.0)]
    assert samples[0].sequences[0].response_mask == (1, 1) and stats.overlong_zeroed_episodes == 1


def test_a_call_whose_client_left_is_not_trained_and_is_counted():
    from dataclasses import replace

    gone = replace(call(1, [1, 2, 3], [7, 8]), error="the client disconnected before [DONE]", client_gone=True)
    (sample,), stats = assemble([_episode("a", 1.0, call(0, [1], [2, 3]), gone)], 100, 100)
    assert [s.response_ids for s in sample.sequences] == [(2, 3)]
    assert stats.client_gone_calls == 1 and stats.failed_calls == 1


def test_answers_two_versions_sampled_and_the_trained_answers_length_are_counted():
    from dataclasses import replace

    straddled = replace(call(0, [1, 2], [3, 4, 5, 6]), version_spans=[(0, 0), (2, 1)])
    eps = [PoolEpisode("e1", "t", 1.0, calls=(straddled,)), PoolEpisode("e2", "t", 0.0, calls=(call(0, [1], [2, 3]),))]
    _, stats = assemble(eps, 100, 100)
    m = stats.metrics()
    assert stats.mixed_version_calls == 1 and stats.answer_tokens == 6
    assert m["partial/mixed_version_share"] == 0.5 and m["partial/trained_answer_tokens_mean"] == 3.0

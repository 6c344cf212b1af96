"""GRPO on verl's functions: advantages equal verl's, the batch layout, and an update lowers the loss."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from ajet.job import AgentJetJob
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.grpo import collate, episode_advantages, loss_config, micro_batches, policy_loss, sequence_logprobs
from ajet_trainer.samples import flatten
from ajet_trainer.types import EpisodeSample, TrainSequence


def sample(uuid, task, reward, prompt=(1, 2), resp=(3, 4), mask=(1, 1)):
    seq = TrainSequence(uuid, task, tuple(prompt), tuple(resp), tuple(mask), tuple(0.0 for _ in resp))
    return EpisodeSample(uuid, task, reward, (seq,))


def test_advantages_equal_verls_token_level_computation():
    samples = [
        sample("a", "t1", 1.0),
        sample("b", "t1", 0.0),
        sample("c", "t1", 0.0),
        sample("d", "t2", 0.3),
        sample("e", "t2", 0.9),
        sample("f", "t3", 1.0),
    ]
    ours = episode_advantages(samples)
    # verl on a token-level layout: reward on the last response token, multi-token rows
    T = 5
    rewards = torch.zeros(len(samples), T)
    rewards[:, -1] = torch.tensor([s.reward for s in samples])
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        rewards, torch.ones(len(samples), T), np.array([s.task_id for s in samples], dtype=object)
    )
    for i, s in enumerate(samples):
        assert ours[s.episode_uuid] == pytest.approx(float(adv[i, 0]), abs=1e-6)
    assert ours["a"] > 0 > ours["b"]
    assert ours["f"] == pytest.approx(1.0, abs=1e-5)  # verl's convention: a group of one keeps its raw reward
    r = torch.tensor([1.0, 0.0, 0.0])
    assert ours["a"] == pytest.approx(float((1 - r.mean()) / (r.std() + 1e-6)), abs=1e-5)


def test_each_sequence_gets_its_episodes_advantage():
    two = EpisodeSample(
        "a",
        "t",
        1.0,
        (TrainSequence("a", "t", (1,), (2,), (1,), (0.0,)), TrainSequence("a", "t", (5,), (6,), (1,), (0.0,))),
    )
    items = flatten([two, sample("b", "t", 0.0)], episode_advantages([two, sample("b", "t", 0.0)]))
    assert items[0][1] == items[1][1] > 0 > items[2][1]


def test_collate_layout():
    items = [
        (TrainSequence("a", "t", (1, 2, 3), (4,), (1,), (-0.5,)), 1.0),
        (TrainSequence("b", "t", (7,), (8, 9, 10), (1, 0, 1), (-1.0, 0.0, -2.0)), -1.0),
    ]
    b = collate(items, pad_id=0)
    assert b.prompt_width == 3
    assert b.input_ids.tolist() == [[1, 2, 3, 4, 0, 0], [0, 0, 7, 8, 9, 10]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert b.position_ids.tolist()[1][2:] == [0, 1, 2, 3]  # left padding does not shift positions
    assert b.response_mask.tolist() == [[1, 0, 0], [1, 0, 1]]
    assert b.advantages.tolist() == [[1, 0, 0], [-1, 0, -1]]


def test_one_update_lowers_the_loss_on_a_fixed_batch(tiny):
    model, tok = tiny
    import copy

    model = copy.deepcopy(model)
    job = AgentJetJob(lr=1e-2, max_prompt_length=64, max_response_length=16, max_model_len=128)
    learner = Learner(model, tok, job)
    samples = [
        sample("a", "t", 1.0, prompt=(5, 6, 7), resp=(40, 41, 42), mask=(1, 1, 1)),
        sample("b", "t", 0.0, prompt=(5, 6, 7), resp=(50, 51), mask=(1, 1)),
        sample("c", "u", 1.0, prompt=(8, 9), resp=(60,), mask=(1,)),
        sample("d", "u", 0.0, prompt=(8, 9), resp=(61, 62, 63, 64), mask=(1, 0, 1, 1)),
    ]
    batch = collate(flatten(samples, episode_advantages(samples)), tok.pad_token_id)
    cfg = loss_config(0.2)
    with torch.no_grad():
        old, _ = sequence_logprobs(model, batch)
        before, _ = policy_loss(old, old, batch, cfg, "token-mean")
    metrics = learner.update(samples)
    with torch.no_grad():
        new, _ = sequence_logprobs(model, batch)
        after, _ = policy_loss(old, new, batch, cfg, "token-mean")
    assert float(after) < float(before)
    assert metrics["grad_norm"] > 0 and metrics["logprob_gap"] > 0  # rollout logprobs here are fake zeros
    # the good answers became more likely, the bad ones less
    assert (new - old)[0, :3].sum() > 0 > (new - old)[1, :2].sum()


def test_kl_loss_and_lora_reference(tiny):
    model, tok = tiny
    from ajet_trainer.policy import load_policy
    from ajet_trainer.tiny_model import builtin_model_path

    job = AgentJetJob(
        lr=1e-2,
        lora_rank=4,
        use_kl_loss=True,
        kl_loss_coef=0.1,
        max_prompt_length=64,
        max_response_length=16,
        max_model_len=128,
    )
    lora_model, _ = load_policy(str(builtin_model_path("builtin:tiny")), job, "cpu")
    learner = Learner(lora_model, tok, job)
    trainable = [n for n, p in lora_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    samples = [sample("a", "t", 1.0, resp=(40, 41)), sample("b", "t", 0.0, resp=(50, 51))]
    m1 = learner.update(samples)
    m2 = learner.update(samples)
    assert m1["kl"] == pytest.approx(0.0, abs=1e-6)  # the adapter starts as the identity
    assert m2["kl"] > 0  # after one step the policy moved away from the reference


def test_reward_statistics_do_not_overflow():
    from ajet_trainer.embedded.learner import reward_stats

    assert reward_stats([1e308, 1e308]) == (1e308, 0.0)
    mean, std = reward_stats([1e308, -1e308])
    assert mean == 0.0 and std == pytest.approx(1e308)
    assert reward_stats([1.0, 0.0]) == (0.5, 0.5)


def test_a_non_finite_update_is_skipped_and_leaves_the_weights(tiny):
    model, tok = tiny
    learner = Learner(model, tok, AgentJetJob(lr=1e-2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # rewards beyond float32: verl's GRPO advantages become inf/nan, so would the loss
    samples = [
        EpisodeSample(u, "t", r, (TrainSequence(u, "t", (5, 6), (40, 41), (1, 1), (0.0, 0.0)),))
        for u, r in (("a", 1e39), ("b", -1e39))
    ]
    metrics = learner.update(samples)
    assert metrics["skipped_minibatches"] == 1.0 and "loss" not in metrics
    assert metrics["reward_mean"] == 0.0  # the statistics themselves stay finite
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    ok = [
        EpisodeSample(u, "t", r, (TrainSequence(u, "t", (5, 6), (40, 41), (1, 1), (0.0, 0.0)),))
        for u, r in (("a", 1.0), ("b", 0.0))
    ]
    assert learner.update(ok)["skipped_minibatches"] == 0.0  # the next healthy step trains
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    model.load_state_dict(before)  # the module's model is shared


def _with_rollout_logprobs(samples, logps):
    """The samples with the engine's log-probs set to `logps` (one list per sample, per response token)."""
    out = []
    for s, lp in zip(samples, logps):
        seq = s.sequences[0]
        out.append(
            EpisodeSample(
                s.episode_uuid,
                s.task_id,
                s.reward,
                (
                    TrainSequence(
                        seq.episode_uuid, seq.task_id, seq.prompt_ids, seq.response_ids, seq.response_mask, tuple(lp)
                    ),
                ),
            )
        )
    return out


def test_truncated_importance_sampling_is_a_no_op_without_a_gap_and_caps_a_gap(tiny):
    import copy

    model, tok = tiny
    base = [
        sample("a", "t", 1.0, prompt=(5, 6, 7), resp=(40, 41, 42), mask=(1, 1, 1)),
        sample("b", "t", 0.0, resp=(50, 51)),
        sample("c", "u", 1.0, prompt=(8, 9), resp=(60,), mask=(1,)),
        sample("d", "u", 0.0, resp=(61, 62)),
    ]
    batch = collate(flatten(base, episode_advantages(base)), tok.pad_token_id)
    with torch.no_grad():
        exact, _ = sequence_logprobs(model, batch)
    # the engine's numbers are the trainer's: the weights are all 1, and the update is the uncorrected one
    same = _with_rollout_logprobs(
        base, [exact[i, : len(s.sequences[0].response_ids)].tolist() for i, s in enumerate(base)]
    )
    job = AgentJetJob(lr=1e-2, max_prompt_length=64, max_response_length=16, max_model_len=128)
    models = [copy.deepcopy(model), copy.deepcopy(model)]
    m_off = Learner(models[0], tok, job).update(same)
    m_on = Learner(models[1], tok, job.model_copy(update={"tis_cap": 2.0})).update(same)
    assert m_on["tis_weight_mean"] == pytest.approx(1.0, abs=1e-5) and m_on["tis_capped_share"] == 0.0
    assert m_on["loss"] == pytest.approx(m_off["loss"], abs=1e-7) and m_on["logprob_gap"] < 1e-6
    for p_off, p_on in zip(models[0].parameters(), models[1].parameters()):
        assert torch.allclose(p_off, p_on, atol=1e-7)
    # an engine far less sure than the trainer (ratio e^3 > cap): weights capped at 2
    far = _with_rollout_logprobs(
        base, [(exact[i, : len(s.sequences[0].response_ids)] - 3.0).tolist() for i, s in enumerate(base)]
    )
    m_far = Learner(copy.deepcopy(model), tok, job.model_copy(update={"tis_cap": 2.0})).update(far)
    assert m_far["tis_weight_max"] == pytest.approx(2.0) and m_far["tis_capped_share"] == 1.0
    assert m_far["logprob_gap"] == pytest.approx(3.0, abs=1e-4) and m_far["logprob_gap_max"] == pytest.approx(
        3.0, abs=1e-4
    )


def test_async_jobs_correct_for_the_behaviour_policy_by_default():
    from ajet_trainer.correction import ASYNC_TIS_CAP, tis_cap

    assert tis_cap(AgentJetJob()) is None  # synchronous: off unless asked
    assert tis_cap(AgentJetJob(max_staleness=1)) == ASYNC_TIS_CAP
    assert tis_cap(AgentJetJob(max_staleness=2, tis_cap=3.0)) == 3.0
    assert tis_cap(AgentJetJob(tis_cap=1.5)) == 1.5


def test_staleness_metrics_count_each_lag_and_the_dropped_share():
    from ajet_store.types import PoolEpisode
    from ajet_trainer.step_record import staleness_metrics

    batch = [PoolEpisode(f"e{i}", "a", 0.0, oldest_version=v) for i, v in enumerate([7, 7, 6, 5])]
    m = staleness_metrics(batch, version=7, dropped=1)
    assert (m["staleness/0"], m["staleness/1"], m["staleness/2"]) == (2.0, 1.0, 1.0)
    assert m["staleness_mean"] == 0.75 and m["staleness_max"] == 2.0
    assert m["dropped_stale"] == 1.0 and m["dropped_stale_share"] == pytest.approx(1 / 5)


def test_entropy_bonus_and_clip_higher_follow_verls_actor(tiny):
    model, tok = tiny
    samples = [
        sample("a", "t", 1.0, prompt=(5, 6, 7), resp=(40, 41), mask=(1, 1)),
        sample("b", "t", 0.0, prompt=(5, 6, 7), resp=(50, 51), mask=(1, 1)),
    ]
    batch = collate(flatten(samples, episode_advantages(samples)), tok.pad_token_id)
    with torch.no_grad():
        logp, entropy = sequence_logprobs(model, batch, with_entropy=True)
        old = logp - 0.5  # every ratio is e^0.5 = 1.65: beyond 1.2, within 1.8
        plain, _ = policy_loss(old, logp, batch, loss_config(0.2), "token-mean")
        bonus, _ = policy_loss(old, logp, batch, loss_config(0.2), "token-mean", entropy=entropy, entropy_coeff=0.1)
        mean_entropy = core_algos.agg_loss(loss_mat=entropy, loss_mask=batch.response_mask, loss_agg_mode="token-mean")
        assert float(bonus) == pytest.approx(float(plain) - 0.1 * float(mean_entropy), abs=1e-6)
        # the positive-advantage tokens are clipped at 1.2 by default, not under a 0.8 upper clip (clip-higher)
        _, m_default = policy_loss(old, logp, batch, loss_config(0.2), "token-mean")
        _, m_higher = policy_loss(old, logp, batch, loss_config(0.2, 0.8), "token-mean")
    assert m_default["clip_frac"] > m_higher["clip_frac"]
    cfg = Learner(model, tok, AgentJetJob(clip_ratio_high=0.28, entropy_coeff=0.01)).cfg
    assert (cfg.clip_ratio, cfg.clip_ratio_high) == (0.2, 0.28)


def test_the_same_batch_in_another_order_makes_the_same_update_bit_for_bit(tiny):
    import copy
    import random

    model, tok = tiny
    samples = [
        sample(f"e{i}", f"t{i % 3}", float(i % 2), prompt=(5, 6 + i % 3), resp=(40 + i, 41), mask=(1, 1))
        for i in range(12)
    ]
    shuffled = samples[:]
    random.Random(1).shuffle(shuffled)
    job = AgentJetJob(lr=1e-2, max_prompt_length=64, max_response_length=16, max_model_len=128)
    weights = []
    for order in (samples, shuffled):
        m = copy.deepcopy(model)
        Learner(m, tok, job).update(order)
        weights.append([p.detach().clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def test_lost_call_metrics_count_against_the_last_steps_total():
    from ajet_trainer.step_record import lost_call_metrics

    assert lost_call_metrics(3, None) == {"lost_call_episodes": 3.0, "lost_call_total": 3.0}
    assert lost_call_metrics(5, {"lost_call_total": 3.0, "loss": 0.1}) == {
        "lost_call_episodes": 2.0,
        "lost_call_total": 5.0,
    }
    assert lost_call_metrics(0, {"loss": 0.1})["lost_call_episodes"] == 0.0  # a step from before the counter


def test_micro_batches_split_rows_by_tokens_and_keep_one_row_at_least():
    assert [t.tolist() for t in micro_batches(5, 4, 8)] == [[0, 1], [2, 3], [4]]
    assert [t.tolist() for t in micro_batches(3, 100, 8)] == [[0], [1], [2]]  # a row wider than the budget
    assert [t.tolist() for t in micro_batches(3, 4, 10_000)] == [[0, 1, 2]]


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batches_accumulate_to_the_same_update(tiny, agg_mode):
    """Split into one-row micro-batches or not, one update moves the weights the same (with a KL loss and an
    entropy bonus, whose aggregation also spans the micro-batches), and reports the same loss."""
    import copy

    model, tok = tiny
    samples = [
        sample("a", "t", 1.0, prompt=(5, 6, 7), resp=(40, 41, 42), mask=(1, 0, 1)),
        sample("b", "t", 0.0, prompt=(5, 6, 7), resp=(50, 51), mask=(1, 1)),
        sample("c", "u", 1.0, prompt=(8, 9), resp=(60,), mask=(1,)),
        sample("d", "u", 0.0, prompt=(8, 9, 10, 11), resp=(61, 62, 63, 64), mask=(1, 1, 1, 1)),
    ]
    runs = []
    for budget in (10_000, 1):
        job = AgentJetJob(lr=1e-2, micro_batch_tokens=budget, loss_agg_mode=agg_mode, use_kl_loss=True,
                          kl_loss_coef=0.5, entropy_coeff=0.1)  # fmt: skip
        learner = Learner(copy.deepcopy(model), tok, job)
        metrics = learner.update(samples)
        runs.append((metrics, [p.detach().clone() for p in learner.params]))
    (whole, w_params), (split, s_params) = runs
    assert whole["loss"] == pytest.approx(split["loss"], rel=1e-5, abs=1e-7)
    assert whole["entropy"] == pytest.approx(split["entropy"], rel=1e-5)
    for a, b in zip(w_params, s_params):
        # AdamW's first step is lr * g / (|g| + eps): a gradient of ~1e-9 turns float noise into a visible step, so
        # the weights are compared at 1% of lr (a wrong normalisation moves them by a good part of lr)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)
    moved = sum(float((p - q.detach()).abs().sum()) for p, q in zip(w_params, model.parameters()))
    assert moved > 0  # the update did something to compare


def test_sequences_without_signal_are_left_out_of_the_pass_and_the_step_is_the_same(tiny):
    """A group whose rewards are all equal has advantage 0: its sequences are not passed over, yet the step equals
    the one over the whole batch (a KL loss at coefficient 0 keeps every sequence in: the reference), including a
    second step whose batch has no signal at all (AdamW's momentum still moves the weights)."""
    import copy

    model, tok = tiny
    first = [
        sample("a", "t", 1.0, prompt=(5, 6, 7), resp=(40, 41, 42), mask=(1, 1, 1)),
        sample("b", "t", 0.0, prompt=(5, 6, 7), resp=(50, 51)),
        sample("c", "u", 1.0, prompt=(8, 9), resp=(60,), mask=(1,)),
        sample("d", "u", 1.0, prompt=(8, 9, 10, 11), resp=(61, 62, 63, 64), mask=(1, 1, 1, 1)),
    ]
    flat = [sample("e", "v", 0.5, resp=(70, 71)), sample("f", "v", 0.5, resp=(72, 73))]
    runs = []
    for job in (AgentJetJob(lr=1e-2), AgentJetJob(lr=1e-2, use_kl_loss=True, kl_loss_coef=0.0)):
        learner = Learner(copy.deepcopy(model), tok, job)
        metrics = [learner.update(first), learner.update(flat)]
        runs.append((metrics, [p.detach().clone() for p in learner.params]))
    (skipping, s_params), (whole, w_params) = runs
    assert skipping[0]["sequences_without_signal"] == 2 and skipping[1]["sequences_without_signal"] == 2
    assert "sequences_without_signal" not in whole[0]
    assert skipping[0]["loss"] == pytest.approx(whole[0]["loss"], rel=1e-5, abs=1e-7)
    for a, b in zip(s_params, w_params):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4)  # at 1% of lr, as above

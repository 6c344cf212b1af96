"""DPO's pure pieces: pairs from two-episode groups, an episode's log-likelihood over its model tokens, the loss."""

import math

import torch

from ajet_trainer.dpo import dpo_loss, episode_logprob, preference_pairs
from ajet_trainer.types import EpisodeSample


def sample(uuid: str, task: str, reward: float) -> EpisodeSample:
    return EpisodeSample(uuid, task, reward, ())


def test_a_pair_is_a_two_episode_group_of_different_rewards():
    samples = [sample("a", "t1", 0.0), sample("b", "t1", 1.0), sample("c", "t2", 1.0), sample("d", "t2", 1.0),
               sample("e", "t3", 1.0)]  # fmt: skip
    pairs = preference_pairs(samples)
    assert [(c.episode_uuid, r.episode_uuid) for c, r in pairs] == [("b", "a")]  # t2 ties, t3 is alone


def test_an_episodes_likelihood_counts_its_model_tokens_only():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])  # an inserted tool result, then padding
    assert float(episode_logprob(logp, mask)) == -13.0


def test_the_loss_is_log2_at_the_reference_and_falls_as_the_chosen_gains():
    zero = torch.tensor(0.0)
    loss, m = dpo_loss(zero, zero, zero, zero, beta=0.1)
    assert math.isclose(float(loss), math.log(2), rel_tol=1e-6) and m["dpo_accuracy"] == 0.0
    better, m2 = dpo_loss(torch.tensor(-1.0), torch.tensor(-5.0), torch.tensor(-3.0), torch.tensor(-3.0), beta=0.1)
    assert float(better) < math.log(2) and m2["dpo_margin"] > 0 and m2["dpo_accuracy"] == 1.0

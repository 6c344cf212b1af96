"""Direct preference optimisation on stored pairs (a replay with `train="dpo"`): pure pieces.

A pair is a group of two episodes of one task (the replay copied a group's highest reward and its lowest,
`ajet_store.best_of_group.preference_pair`). An episode's log-likelihood is the sum of its model tokens' log-probs
over all its sequences (GRPO's masks: tokens the agent or its tools inserted do not count). The loss is DPO's,
-log sigmoid(beta * ((chosen - chosen_ref) - (rejected - rejected_ref))), against the reference policy (the model
the session started from: the base with the adapter off, for LoRA).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch
import torch.nn.functional as F

from ajet_trainer.types import EpisodeSample


def preference_pairs(samples: Sequence[EpisodeSample]) -> list[tuple[EpisodeSample, EpisodeSample]]:
    """(chosen, rejected) of each task whose group is two episodes of different rewards, in task order; a group of
    another size, or of equal rewards, is no pair."""
    groups: dict[str, list[EpisodeSample]] = defaultdict(list)
    for s in samples:
        groups[s.task_id].append(s)
    pairs = []
    for task in sorted(groups):
        group = groups[task]
        if len(group) == 2 and group[0].reward != group[1].reward:
            high, low = sorted(group, key=lambda s: -s.reward)
            pairs.append((high, low))
    return pairs


def episode_logprob(token_logp: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """An episode's log-likelihood from its sequences' token log-probs [S, R] and masks [S, R]: one number."""
    return (token_logp * response_mask).sum()


def dpo_loss(
    chosen: torch.Tensor, rejected: torch.Tensor, chosen_ref: torch.Tensor, rejected_ref: torch.Tensor, beta: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO's loss of one pair (log-likelihoods under the policy and the reference), and its metrics: the implicit
    reward margin, and whether the policy prefers the chosen episode more than the reference does."""
    margin = beta * ((chosen - chosen_ref) - (rejected - rejected_ref))
    loss = -F.logsigmoid(margin)
    return loss, {"dpo_margin": float(margin.detach()), "dpo_accuracy": float(margin.detach() > 0)}

"""GRPO advantages of a group's rewards, recomputed for display with verl's outcome formula (the trainer's
`grpo.episode_advantages` calls verl's `compute_grpo_outcome_advantage`; `tests/proxy/explore/` checks that the
two agree): (reward - group mean) / (group standard deviation + 1e-6), the deviation unbiased (n - 1); a group
of one has mean 0 and deviation 1."""

from __future__ import annotations

import math
from typing import Sequence

EPSILON = 1e-6


def group_advantages(rewards: Sequence[float], norm_by_std: bool = True) -> list[float]:
    """Each reward's advantage within its group."""
    n = len(rewards)
    if n == 0:
        return []
    if n == 1:
        mean, std = 0.0, 1.0
    else:
        mean = sum(rewards) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + EPSILON) if norm_by_std else r - mean for r in rewards]

"""A group's best episode (for SFT) and its preference pair (for DPO): pure choices over rewards.

A group is the episodes of one task that one step trained (GRPO's group; `RewardOps.rewarded_groups` reads them
under any reward version). SFT takes a group's best episode when it beat its group; DPO pairs a group's highest
reward against its lowest when they differ by at least a margin. Ties go to the earlier episode (its uuid), so the
same store and options always give the same dataset.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Member:
    """An episode of a group, with the reward it is judged by."""

    uuid: str
    """The episode."""
    reward: float
    """Its reward under the chosen reward version (0: its client's)."""


def _ranked(group: Sequence[Member]) -> list[Member]:
    """Best first; among equal rewards, the smaller uuid first."""
    return sorted(group, key=lambda m: (-m.reward, m.uuid))


def best_episode(group: Sequence[Member], min_reward: Optional[float] = None) -> Optional[Member]:
    """The group's best episode, or None. With `min_reward`, the best counts when its reward is at least that;
    without, when it beat its group (above the group's mean: a group whose episodes all scored alike, or of one
    episode, shows no best)."""
    if not group:
        return None
    best = _ranked(group)[0]
    if min_reward is not None:
        return best if best.reward >= min_reward else None
    return best if best.reward > statistics.fmean(m.reward for m in group) else None


def preference_pair(group: Sequence[Member], margin: float) -> Optional[tuple[Member, Member]]:
    """(chosen, rejected): the group's highest reward against its lowest, when they differ by at least `margin`
    (and at all: a `margin` of 0 still needs a difference); else None."""
    if len(group) < 2:
        return None
    ranked = _ranked(group)
    chosen, rejected = ranked[0], sorted(group, key=lambda m: (m.reward, m.uuid))[0]
    gap = chosen.reward - rejected.reward
    return (chosen, rejected) if gap > 0 and gap >= margin else None

"""What a replay job trains on: stored episodes of an experiment, under a reward version (`AgentJetJob.replay`).

A job with `replay` set trains from the store instead of from new episodes: the trainer copies the selected
episodes of the source experiment (their exact token ids and log-probabilities, group by group) into the replay
experiment's own store, each judged by the reward version, and trains them as any run, with the off-policy
correction on at every step (`tis_cap`, 2.0 when unset): they were sampled by another policy. No agent needs to
run; a job whose clients also run episodes mixes the copies into its batches (`mission` and `mission_mix`).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ajet.rescore_types import EpisodeSelection
from ajet.wire import WireModel


class ReplaySource(WireModel):
    """The stored episodes a replay job trains on, and how they are judged."""

    experiment: Optional[str] = Field(default=None, min_length=1, max_length=256)
    """The source experiment (`project_name/experiment_name` of its job); None: the swarm's default experiment."""
    selection: EpisodeSelection = Field(default_factory=EpisodeSelection)
    """Which of its ended episodes (steps, task, mission, eval, scored by an earlier version)."""
    reward_version: int = Field(default=0, ge=0)
    """The reward each episode trains with: 0 is its client's, a later version a re-scoring's (`rescore`); an
    episode that version did not score, or scored with an error, is not replayed."""
    train: Literal["grpo", "sft", "dpo"] = "grpo"
    """How the copies train. `grpo`: every episode of each group, with the group's advantages. `sft`: each group's
    best episode only (`ajet_store.best_of_group`: above its group's mean, or from `min_reward`), its exact ids with
    GRPO's masks, each of its model tokens pushed up alike (advantage 1: the log-likelihood's gradient); the job's
    `num_repeat` is then 1. `dpo`: each group's highest reward against its lowest, `margin` apart, trained by
    DPO's loss against the reference policy (the model the run started from); `num_repeat` is then 2."""
    min_reward: Optional[float] = None
    """`sft`: a group's best counts from this reward (default: when it beat its group's mean)."""
    margin: float = Field(default=0.0, ge=0)
    """`dpo`: the least reward gap of a pair (any gap above 0 by default)."""
    beta: float = Field(default=0.1, gt=0)
    """`dpo`: DPO's temperature (how far from the reference the implicit reward lets the policy move)."""
    mission: Optional[str] = Field(default=None, min_length=1, max_length=128)
    """The mission the copies are labelled with (None: each keeps its own). An online job that also takes new
    episodes caps the copies' share of each batch with `mission_mix` (a replay buffer: `{"replay": 0.25}`)."""

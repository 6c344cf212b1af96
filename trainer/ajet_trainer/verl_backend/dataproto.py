"""Store episodes -> verl's `DataProto`, with the same sample rules as the embedded trainer.

Layout (verl's): `prompts` left-padded, `responses` right-padded, `input_ids = cat(prompts, responses)`,
`attention_mask`, `position_ids`, `response_mask`, `rollout_log_probs`, the reward on the last valid
response token (`token_level_scores` = `token_level_rewards`), and `uid` = the task id (the GRPO group).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from verl import DataProto

from ajet_trainer.grpo import collate
from ajet_trainer.samples import flatten
from ajet_trainer.types import EpisodeSample


def samples_to_dataproto(samples: Sequence[EpisodeSample], pad_id: int) -> DataProto:
    """One row per training sequence; rewards on each row's last valid response token."""
    items = flatten(samples)
    batch = collate(items, pad_id)
    rewards = torch.zeros_like(batch.response_mask)
    lengths = torch.tensor([len(s.response_ids) for s, _ in items])
    row_reward = {ep.episode_uuid: ep.reward for ep in samples}
    rewards[torch.arange(len(items)), lengths - 1] = torch.tensor([row_reward[s.episode_uuid] for s, _ in items])
    P = batch.prompt_width
    tensors = {"prompts": batch.input_ids[:, :P], "responses": batch.responses, "input_ids": batch.input_ids,
               "attention_mask": batch.attention_mask, "position_ids": batch.position_ids,
               "response_mask": batch.response_mask, "rollout_log_probs": batch.rollout_logprobs,
               "token_level_scores": rewards, "token_level_rewards": rewards.clone()}
    non_tensors = {"uid": np.array([s.task_id for s, _ in items], dtype=object),
                   "episode_uuid": np.array([s.episode_uuid for s, _ in items], dtype=object)}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

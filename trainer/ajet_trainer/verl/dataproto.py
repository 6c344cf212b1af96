"""Store episodes -> verl's `DataProto`, with the same sample rules as the embedded trainer.

Layout (verl's): `prompts` left-padded, `responses` right-padded, `input_ids = cat(prompts, responses)`,
`attention_mask`, `position_ids`, `response_mask`, `rollout_log_probs`, the reward on the last valid
response token (`token_level_scores` = `token_level_rewards`), and `uid` = the task id (the GRPO group).

verl's update splits rows into mini-batches that must divide the batch; episodes of several sequences
(or partial batch modes) make the row count arbitrary, so `pad_rows` adds rows that train nothing.
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
    tensors = {
        "prompts": batch.input_ids[:, :P],
        "responses": batch.responses,
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
        "response_mask": batch.response_mask,
        "rollout_log_probs": batch.rollout_logprobs,
        "token_level_scores": rewards,
        "token_level_rewards": rewards.clone(),
    }
    non_tensors = {
        "uid": np.array([s.task_id for s, _ in items], dtype=object),
        "episode_uuid": np.array([s.episode_uuid for s, _ in items], dtype=object),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


PAD_UID = "__ajet_pad__"
"""`uid` of the rows `pad_rows` adds (their `episode_uuid` is empty)."""


def pad_rows(data: DataProto, multiple: int) -> DataProto:
    """Append copies of row 0 with no trained token and no reward until `len` is a multiple of `multiple`."""
    missing = -len(data) % max(1, multiple)
    if missing == 0:
        return data
    pad = data.select_idxs([0] * missing)
    for key in ("response_mask", "token_level_scores", "token_level_rewards", "rm_scores", "rollout_log_probs"):
        if key in pad.batch.keys():
            pad.batch[key] = torch.zeros_like(pad.batch[key])
    pad.non_tensor_batch["uid"] = np.array([PAD_UID] * missing, dtype=object)
    pad.non_tensor_batch["episode_uuid"] = np.array([""] * missing, dtype=object)
    return DataProto.concat([data, pad])


def real_rows(data: DataProto) -> DataProto:
    """`data` without the rows `pad_rows` added."""
    keep = np.array([u != PAD_UID for u in data.non_tensor_batch["uid"]])
    return data if keep.all() else data.select_idxs(keep)

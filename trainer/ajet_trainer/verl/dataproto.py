"""Store episodes -> verl's `DataProto`, with the same sample rules as the embedded trainer.

Layout (verl's): `prompts` left-padded, `responses` right-padded, `input_ids = cat(prompts, responses)`,
`attention_mask`, `position_ids`, `response_mask`, `rollout_log_probs`, the reward on the last valid
response token (`token_level_scores` = `token_level_rewards`), and `uid` = the task id (the GRPO group).

verl's update splits rows into mini-batches that must divide the batch; episodes of several sequences
(or partial batch modes) make the row count arbitrary, so `pad_rows` adds rows that train nothing.

A VL model's rows carry their images the way verl's actor takes them: `multi_modal_inputs` (a non-tensor, one dict
per row of its `pixel_values` and `image_grid_thw`, None for a row without images), and `position_ids` of shape
(rows, 4, width): the text positions, then Qwen2-VL's three multimodal ones (`vision.rope_positions`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from verl import DataProto

from ajet_trainer.grpo import Batch, collate
from ajet_trainer.samples import flatten
from ajet_trainer.types import EpisodeSample
from ajet_trainer.vision import ImageInputs, ImageReader, Vision, joined, rope_positions


def samples_to_dataproto(
    samples: Sequence[EpisodeSample], pad_id: int, images: Optional[ImageReader] = None
) -> DataProto:
    """One row per training sequence; rewards on each row's last valid response token; with `images` (a VL model's),
    each row's pixels and the multimodal positions."""
    items = flatten(samples)
    batch = collate(items, pad_id, images)
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
    if images is not None and any(i is not None for i in batch.images):
        tensors["position_ids"] = _with_rope(batch, images.vision)
        non_tensors["multi_modal_inputs"] = _pixels(batch.images)
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def _with_rope(batch: Batch, vision: Vision) -> torch.Tensor:
    """(rows, 4, width): each row's text positions, then its three multimodal ones (verl's layout for Qwen2-VL)."""
    grids = joined(batch.images)
    assert grids is not None
    rope = rope_positions(batch.input_ids, batch.attention_mask, grids.grid_thw, vision.image_token_id, vision.merge)
    return torch.cat([batch.position_ids[None], rope]).permute(1, 0, 2).contiguous()


def _pixels(rows: Sequence[Optional[ImageInputs]]) -> np.ndarray:
    """verl's `multi_modal_inputs`: per row its pixel values and grids (None: a row without images)."""
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        out[i] = None if row is None else {"pixel_values": row.pixel_values, "image_grid_thw": row.grid_thw}
    return out


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

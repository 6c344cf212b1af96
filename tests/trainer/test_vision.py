"""`ajet_trainer.vision`'s pure parts: each image's placeholder run, and the multimodal positions computed without a
model, equal to Qwen2-VL's own (`get_rope_index`) on a left-padded batch of rows with images of two sizes and a text
row."""

from __future__ import annotations

import pytest
import torch

from ajet.errors import InvalidRequest
from ajet_trainer.vision import placeholder_runs, rope_positions


def test_positions_without_a_model_are_qwen2_vls_own(tiny_vl):
    model, _tok = tiny_vl
    image = model.config.image_token_id
    rows = [[1, 2, 3, *[image] * 4, 5, 6, *[image] * 12, 7], [9, 8, *[image] * 4, 4], [1, 2, 3, 4, 5]]
    grids = torch.tensor([[1, 4, 4], [1, 6, 8], [1, 4, 4]])
    width = max(map(len, rows))
    ids, mask = torch.zeros((3, width), dtype=torch.long), torch.zeros((3, width), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, width - len(row) :], mask[r, width - len(row) :] = torch.tensor(row), 1
    theirs, _ = model.model.get_rope_index(ids, (ids == image).int(), grids, attention_mask=mask)
    assert torch.equal(rope_positions(ids, mask, grids, image, 2), theirs)


def test_runs_are_found_and_a_forwarded_prompt_must_match_its_images(tiny_vl):
    from ajet_trainer.vision import Vision
    from tests.support.images import png, user_with_image

    model, tok = tiny_vl
    vision = Vision.of_model(model, tok)
    assert placeholder_runs([5, 7, 7, 5, 7], 7) == [(1, 2), (4, 1)]
    inputs = vision.inputs_of([user_with_image("a", png(56, 56)), user_with_image("b", png(100, 80))])
    assert vision.run_lengths(inputs.grid_thw) == [4, 12]
    token = vision.image_token_id
    vision.check_runs([1, *[token] * 4, 2, *[token] * 12], inputs, "f")
    with pytest.raises(InvalidRequest, match=r"\[12, 4\] do not match the messages' images \[4, 12\]"):
        vision.check_runs([1, *[token] * 12, 2, *[token] * 4], inputs, "f")

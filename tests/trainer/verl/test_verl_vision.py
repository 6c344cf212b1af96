"""verl's real actor trains the built-in VL model on CPU with the pixels the engine saw: each row's images go in as
verl expects them (`multi_modal_inputs`, positions of shape (rows, 4, width)), verl's log-probs of the engine's
answers equal the engine's, and the update moves the vision tower."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ajet import AgentJetJob
from ajet_trainer.types import EpisodeSample
from ajet_trainer.verl.dataproto import samples_to_dataproto
from ajet_trainer.vision import ImageReader, Vision
from tests.support.images import answered_samples, png
from tests.support.verl_actor import verl_cpu_trainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

JOB = AgentJetJob(model="builtin:tiny-vl", n_gpu=1, batch_size=2, num_repeat=2, lr=5e-3, save_freq=0,
                  max_prompt_length=64, max_response_length=64, max_model_len=256, max_response_length_in_one_turn=8,
                  experiment_name="verl-vision")  # fmt: skip
SCREENS = [png(colour=(255, 0, 0)), png(colour=(0, 0, 255)), png(100, 80, (0, 200, 0)), png(colour=(9, 9, 9))]


def _samples(model, tok) -> tuple[list[EpisodeSample], dict[str, bytes]]:
    """Two groups of two episodes, each one call with its own image, answered by the embedded engine."""
    return answered_samples(model, tok, SCREENS, lambda n: f"t{n // 2}", lambda n: float(n % 2))


def test_the_rows_carry_their_pixels_and_multimodal_positions_as_verl_takes_them(tiny_vl):
    model, tok = tiny_vl
    samples, files = _samples(model, tok)
    reader = ImageReader(Vision.of_model(model, tok), lambda hashes: {h: files[h] for h in hashes})
    data = samples_to_dataproto(samples, tok.pad_token_id, reader)
    position_ids, mm = data.batch["position_ids"], data.non_tensor_batch["multi_modal_inputs"]
    assert position_ids.shape == (4, 4, data.batch["input_ids"].shape[1])
    assert torch.equal(position_ids[:, 0], data.batch["attention_mask"].cumsum(-1).sub(1).clamp(min=0))
    assert [tuple(row["image_grid_thw"].tolist()[0]) for row in mm] == [(1, 4, 4), (1, 4, 4), (1, 6, 8), (1, 4, 4)]


def test_verls_actor_scores_the_engines_answers_with_their_pixels_and_trains_the_vision_tower(tiny_vl, tmp_path: Path):
    model, tok = tiny_vl
    samples, files = _samples(model, tok)
    pulled: list[dict[str, torch.Tensor]] = []
    with verl_cpu_trainer(JOB, tmp_path, lambda sd: pulled.append({k: v.clone() for k, v in sd.items()})) as trainer:
        trainer.ajet_images = ImageReader(Vision.of_model(model, tok), lambda hashes: {h: files[h] for h in hashes})
        metrics = trainer.train_samples(samples)
    assert metrics["training/rollout_probs_diff_max"] < 1e-5  # the engine's log-probs, pixels included (3e-10 here)
    first, last = pulled[0], pulled[-1]
    moved = [k for k in first if not torch.equal(first[k], last[k])]
    assert any(k.startswith("model.visual.") for k in moved)

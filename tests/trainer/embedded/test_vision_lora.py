"""A LoRA job on the built-in VL model, without a swarm: the engine serves the adapter with images, and one GRPO
update on two episodes whose images differ reads the pixels back by hash and moves the adapter, the vision tower's
included ("all-linear" reaches its layers), never the base weights."""

from __future__ import annotations

import torch

from ajet.job import AgentJetJob
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.vision import ImageReader, Vision
from tests.support.images import answered_samples, png


def test_a_lora_update_with_images_moves_the_adapter_and_not_the_base():
    job = AgentJetJob(model="builtin:tiny-vl", lora_rank=8, lora_alpha=16, lr=1e-2, num_repeat=2, batch_size=1)
    model, tok = load_policy(str(builtin_model_path(job.model)), job, "cpu")
    screens = (png(colour=(255, 0, 0)), png(colour=(0, 0, 255)))
    samples, files = answered_samples(model, tok, screens, lambda n: "t", float)
    learner = Learner(model, tok, job)
    reads: list[list[str]] = []
    learner.images = ImageReader(Vision.of_model(model, tok), lambda h: reads.append(h) or {k: files[k] for k in h})
    named = dict(model.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    metrics = learner.update(samples)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values() if isinstance(v, float))
    assert sorted(h for batch in reads for h in batch) == sorted(files)  # each file read once
    moved = {k for k, v in named.items() if not torch.equal(v, before[k])}
    assert moved and all("lora_" in k for k in moved)  # the adapter only
    assert any(".visual." in k for k in moved)  # the pixels' path trains too

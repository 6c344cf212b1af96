"""Trainer fixtures: the built-in tiny model, loaded once per module."""

import pytest
import torch

from ajet.job import AgentJetJob
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    return model, tok


@pytest.fixture(scope="session")
def tiny_vl():
    """The built-in vision-language model `builtin:tiny-vl` (Qwen2-VL's shape) and its tokenizer."""
    model, tok = load_policy(str(builtin_model_path("builtin:tiny-vl")), AgentJetJob(), "cpu")
    return model, tok

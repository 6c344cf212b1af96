"""vLLM 0.32's CPU build and a vision-language model: vLLM imports torchvision for Qwen2-VL, which the CPU build's
environment cannot load (docs/vision.md), so a launch of `builtin:tiny-vl` is refused in one line before vLLM starts,
naming the way out (the embedded engine)."""

from __future__ import annotations

import subprocess

import pytest

from ajet_trainer.errors import EngineStartError
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.real_vllm import start_vllm, vllm_python

pytestmark = [pytest.mark.vllm_real]


def test_a_vl_model_is_refused_naming_torchvision_and_the_embedded_engine(tmp_path):
    python = vllm_python()
    imports = subprocess.run([python, "-c", "import torchvision"], capture_output=True).returncode == 0
    assert not imports, "vLLM's CPU environment now has torchvision: serve tiny-vl there and test it instead"
    with pytest.raises(EngineStartError) as refused:
        start_vllm(tmp_path, model_path=str(builtin_model_path("builtin:tiny-vl")), timeout_s=60)
    assert "torchvision" in str(refused.value) and "--engine embedded" in str(refused.value)
    assert not (tmp_path / "vllm.log").exists() or "Qwen2VL" not in (tmp_path / "vllm.log").read_text()

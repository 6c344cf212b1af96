"""`ajet_trainer.verl_algos`: verl's algorithms on a machine without Ray, in a subprocess that imports only what the
bare GPU box has (torch, transformers, peft and their requirements) and what its wheel list brings
(`scripts/gpu_wheels.txt`): any other distribution, Ray included, fails to import as it does there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scripts.source_tree import pythonpath
from tests.support.gpu_box import box_site
from tests.support.procs import REPO

SCRIPT = """
import json, sys
import torch
from ajet_trainer import grpo
from ajet_trainer.types import EpisodeSample, TrainSequence
from ajet_trainer.verl_algos import RayNotInstalled

seq = lambda e: (TrainSequence(e, "t", (1, 2), (3,), (1,), (-0.5,)),)
adv = grpo.episode_advantages([EpisodeSample(e, "t", r, seq(e)) for e, r in (("a", 1.0), ("b", 0.0))])
w, m = grpo.tis_weights(torch.tensor([[-1.0, -0.1]]), torch.tensor([[-0.1, -0.1]]), torch.ones(1, 2), cap=2.0)
try:
    import ray
    ray_after = "imported"
except ImportError:
    ray_after = "ImportError"
import verl.protocol
try:
    verl.protocol.ray.remote
    reached = "no error"
except RayNotInstalled as e:
    reached = str(e)
print(json.dumps({"adv": adv, "tis": m, "ray_after": ray_after, "reached": reached}))
"""


def test_verls_algorithms_run_with_only_what_the_gpu_box_has(tmp_path: Path):
    path = os.pathsep.join([str(box_site(tmp_path)), pythonpath(REPO)])  # the project's folders, as on the box
    res = subprocess.run(  # -S: no site-packages, only the box's folder above
        [sys.executable, "-S", "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["adv"]["a"] > 0 > out["adv"]["b"]  # verl's GRPO advantage, computed
    assert out["tis"]["tis_weight_max"] == 1.0 and 0 < out["tis"]["tis_weight_mean"] < 1  # its rollout correction
    assert out["ray_after"] == "ImportError"  # the stand-in lived only for verl's import
    assert "ray.remote: Ray is not installed" in out["reached"]  # verl code that reaches Ray says what is missing

"""`scripts/gpu_check.sh`, the check for a bare GPU box, in its CPU dry run; and its wheel list: what the proxy and
the embedded engine import beyond torch, transformers and peft, under 64 MiB."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from scripts.source_tree import source_folders
from tests.support.gpu_box import BOX_HAS, box_site, listed, requirements_closure
from tests.support.procs import REPO


def test_the_wheel_list_is_pinned_to_this_environment_and_under_64_mib():
    wheels = listed()
    assert wheels, "no wheels listed"
    for name, (version, _mib) in wheels.items():
        assert md.version(name) == version, name  # `make gpu-wheels` downloads what the tests ran with
    assert sum(mib for _v, mib in wheels.values()) < 64  # installed sizes: a bound of the wheels' sizes


ROOTS = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "aiohttp", "orjson", "httpx", "httpx-aiohttp", "pydantic")
ROOTS += ("python-multipart", "pyyaml", "omegaconf", "tensordict", "codetiming")
"""What the proxy, the store, the embedded engine and verl's algorithms import (the rest comes with these; verl is
installed without its own requirements, of which the algorithms import only these)."""


def test_the_wheel_list_covers_what_the_proxy_and_the_engine_need():
    needed = requirements_closure(ROOTS)
    covered = set(listed()) | requirements_closure(BOX_HAS)
    assert sorted(needed - covered) == []  # every requirement the box lacks is a listed wheel
    assert "verl" in covered
    for name in ROOTS:  # and the roots are the imports: none of our modules the GPU check loads needs more
        assert md.version(name)


def _dry_run(out: Path, *flags: str, env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--model", "builtin:tiny",
         "--agents", "8", "--calls", "2", "--max-tokens", "8", "--out", str(out),
         "--engine-args", "--concurrency 1 4 --tokens 8 --repeats 1", *flags],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PY": sys.executable, **(env or {})}, cwd=REPO,
    )  # fmt: skip


def _on_the_box(tmp_path: Path) -> dict[str, str]:
    """An environment that imports only what the GPU box has and the wheels bring (no Ray, no vLLM, ...)."""
    return {"PY": f"{sys.executable} -S", "PYTHONPATH": str(box_site(tmp_path))}


@pytest.mark.slow
def test_the_cpu_dry_run_measures_the_proxys_share(tmp_path: Path):
    """With only what the box has and the wheels bring (no Ray): the trainer step runs on verl's algorithms."""
    out = tmp_path / "gpu_check.jsonl"
    res = _dry_run(out, "--repeats", "2", env=_on_the_box(tmp_path))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    figures = {line.get("figure"): line for line in lines if line.get("bench") in ("proxy_share", "gpu_check")}
    assert {"direct", "through_proxy", "proxy_share"} <= set(figures)
    steps = [line for line in lines if "update_s" in line]  # the trainer's two GRPO steps ran, new weights served
    assert [line["step"] for line in steps] == [0, 1] and steps[1]["served_versions"] == [1]
    assert all(line["trainer_tokens_per_s"] > 0 and 0 < line["mfu_of_measured_matmul"] for line in steps)
    assert any(line.get("matmul_tflops", 0) > 0 for line in lines)  # the rate the MFU is taken over, measured
    engine = [line for line in lines if line.get("figure") == "compare" and "engine_over_generate" in line]
    kinds = [(line["prompts"], line["concurrency"]) for line in engine]  # one prompt for all, then one each
    assert kinds == [("same", 1), ("same", 4), ("distinct", 1), ("distinct", 4)]
    assert all(e["engine_over_generate"] > 0 for e in engine)
    assert figures["direct"]["tokens_per_s"]["median"] > 0 and figures["through_proxy"]["calls_logged"] == 32
    share = figures["proxy_share"]
    assert -1.0 < share["value"] < 1.0 and share["repeats"] == 2  # signed as measured, never clamped
    assert share["per_repeat"]["min"] <= share["per_repeat"]["median"] <= share["per_repeat"]["max"]
    for line in lines[:-1]:  # every row stamped by the script itself
        assert {"commit", "date", "machine", "torch", "device_name"} <= set(line), line
    assert lines[-1] == {"bench": "gpu_check", "figure": "verdict", "pass": True, "exit": 0}
    assert json.loads(res.stdout.strip().splitlines()[-1])["pass"] is True


@pytest.mark.slow
def test_a_part_that_does_not_run_fails_the_verdict(tmp_path: Path):
    """The first GPU run passed while its trainer step was skipped (no Ray on the box): a skipped part is a failed
    check. Here verl itself does not import (a module of that name that raises), so the trainer step cannot run."""
    fake = tmp_path / "no_verl"
    fake.mkdir()
    (fake / "verl.py").write_text("raise ImportError('no verl on this box')\n")
    out = tmp_path / "gpu_check.jsonl"
    res = _dry_run(out, "--repeats", "1", "--agents", "2", "--calls", "1", env={"PYTHONPATH": str(fake)})
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    skipped = [line for line in lines if line.get("figure") == "trainer_step"]
    assert skipped and "no verl on this box" in skipped[0]["skipped"], lines
    assert res.returncode == 3 and lines[-1] == {"bench": "gpu_check", "figure": "verdict", "pass": False, "exit": 3}


def test_a_failing_step_fails_the_check_with_its_verdict(tmp_path: Path):
    """Round three: the GPU scripts swallowed failures. A step that fails (a model that does not exist) fails the
    script, and its last line says so."""
    out = tmp_path / "gpu_check.jsonl"
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--model", str(tmp_path / "no-model"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PY": sys.executable}, cwd=REPO,
    )  # fmt: skip
    assert res.returncode != 0
    verdict = json.loads(res.stdout.strip().splitlines()[-1])
    assert verdict["pass"] is False and verdict["exit"] == res.returncode


@pytest.mark.gpu
def test_the_engine_and_trainer_steps_on_the_gpu():
    """On a GPU box (`make test` where `nvidia-smi` is, and `scripts/gpu_test.sh` after the whole check): the engine
    and two GRPO steps on CUDA in bf16, the new weights served, each step's figures in its row. The whole check
    (`gpu_check.sh`: the proxy's share, the engine bench) runs in `gpu_test.sh` itself, not again here, so that the
    prepared script fits one 10-minute run."""
    import torch

    from tests.support.require import need

    need(torch.cuda.is_available(), "no CUDA device", "AJET_REQUIRE_GPU")
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--device", "cuda", "--model", "builtin:small",
         "--steps", "2", "--requests", "16"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    steps = [row for row in rows if "update_s" in row]
    assert [row["served_versions"] for row in steps] == [[0], [1]]
    assert all(row["dtype"] == "bfloat16" for row in rows if "dtype" in row)
    assert all(row["mfu_of_measured_matmul"] > 0 and row["logprob_gap"] < 0.1 for row in steps)


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_test.sh", "gpu_real_model.sh"])
def test_the_box_scripts_put_every_package_folder_on_the_path(script):
    """The box runs the checkout uninstalled: each script's PYTHONPATH names every folder pyproject.toml packs."""
    line = next(x for x in (REPO / "scripts" / script).read_text().splitlines() if x.startswith("export PYTHONPATH="))
    assert all(f"$PWD/{folder}:" in line for folder in source_folders()), line

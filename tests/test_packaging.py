"""A wheel built from the tree carries every package and its data, and runs from an install, not the checkout:
the verl backend composes its config from the packaged default overrides."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.procs import REPO, offline_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(),
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return path


def test_wheel_carries_packages_and_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for pkg in (
        "ajet",
        "ajet_proxy",
        "ajet_store",
        "ajet_token_history",
        "ajet_swarm",
        "ajet_trainer",
        "ajet_trainer/verl",
        "ajet_trainer/vllm",
        "ajet_trainer/embedded",
    ):
        assert f"{pkg}/__init__.py" in names, pkg
    for name in ("proxy", "trainer", "swarm", "job", "verl_overrides"):
        assert f"ajet/configs/{name}.yaml" in names, name
    assert "ajet/skills/write_swarm_client/SKILL.md" in names
    assert "ajet/skills/write_swarm_client/reference/swarm_guide.md" in names
    assert any(n.startswith("ajet/templates/swarm_client/") and n.endswith(".tmpl") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "ajet-swarm = ajet_swarm.cli:main" in text and "ajet-trainer = ajet_trainer.cli:main" in text


def _installed(wheel: Path, tmp_path: Path) -> Path:
    """The wheel installed into a folder of its own (`pip install --target`); returns the folder."""
    target = tmp_path / "site"
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return target


def _run_outside(code: str, target: Path, cwd: Path) -> list[str]:
    """`code` run outside the checkout, with the wheel's install first on the path; its output's words."""
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=offline_env(PYTHONPATH=str(target)),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.split()


def test_installed_wheel_composes_the_verl_config_from_package_data(wheel, tmp_path):
    target = _installed(wheel, tmp_path)
    code = (
        "import ajet_trainer.verl.config as c, ajet\n"
        "from ajet import AgentJetJob\n"
        f"assert c.__file__.startswith({str(target)!r}), c.__file__\n"
        "cfg = c.compose_verl_config(AgentJetJob(n_gpu=1), model_path='/models/m')\n"
        "print(cfg.actor_rollout_ref.rollout.name, cfg.actor_rollout_ref.model.use_remove_padding)\n"
    )
    assert _run_outside(code, target, tmp_path)[-2:] == ["vllm", "True"]


def test_installed_wheel_finds_the_configs_outside_the_checkout(wheel, tmp_path):
    target = _installed(wheel, tmp_path)
    (target / "ajet" / "configs" / "proxy.yaml").write_text(
        (REPO / "configs" / "proxy.yaml").read_text().replace("port: 10086", "port: 10999")
    )
    code = (
        "from ajet.utils.flags import config_dir\n"
        "from ajet_swarm.cli import parse_args\n"
        f"assert str(config_dir()).startswith({str(target)!r}), config_dir()\n"
        "args = parse_args(['start'])\n"
        "print(args.port, args.host, args.engine)\n"
    )
    assert _run_outside(code, target, tmp_path) == ["10999", "0.0.0.0", "auto"]  # the installed file's defaults

"""The two wheels built from the tree: the SDK's carries `ajet` alone (no server code: a client machine's install),
the servers' every server package and its data; together they run from an install, not the checkout: the verl
backend composes its config from the packaged default overrides."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.procs import REPO, offline_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two wheels of the tree, by distribution: `sdk` (the root's) and `server` (server/'s)."""
    out = tmp_path_factory.mktemp("wheel")
    for stale in (REPO / "build", REPO / "server" / "build"):  # setuptools packs an older tree's copies left there
        shutil.rmtree(stale, ignore_errors=True)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO),
         str(REPO / "server")],
        capture_output=True, text=True, timeout=300, env=offline_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    (sdk,) = out.glob("agentjet_swarm-*.whl")
    (server,) = out.glob("agentjet_swarm_server-*.whl")
    return {"sdk": sdk, "server": server}


def packages(wheel: Path) -> set[str]:
    """The top-level packages a wheel installs."""
    names = zipfile.ZipFile(wheel).namelist()
    return {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith(".dist-info")}


def test_the_sdk_wheel_carries_no_server_code(wheels):
    assert packages(wheels["sdk"]) == {"ajet"}
    assert packages(wheels["server"]) == {
        "ajet_core", "ajet_proxy", "ajet_store", "ajet_swarm", "ajet_token_history", "ajet_trainer"
    }  # fmt: skip
    assert not any(n.endswith("entry_points.txt") for n in zipfile.ZipFile(wheels["sdk"]).namelist())


def test_wheels_carry_packages_and_data(wheels):
    names = set(zipfile.ZipFile(wheels["sdk"]).namelist()) | set(zipfile.ZipFile(wheels["server"]).namelist())
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
    assert "ajet_store/migrations/env.py" in names and "ajet_proxy/explore/templates/base.html" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheels["server"]).read(entry_points).decode()
    assert "ajet-swarm = ajet_swarm.cli:main" in text and "ajet-trainer = ajet_trainer.cli:main" in text


def _installed(wheels: dict[str, Path], tmp_path: Path) -> Path:
    """Both wheels installed into a folder of their own (`pip install --target`); returns the folder."""
    target = tmp_path / "site"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            *map(str, wheels.values()),
        ],
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


def test_installed_wheel_composes_the_verl_config_from_package_data(wheels, tmp_path):
    target = _installed(wheels, tmp_path)
    code = (
        "import ajet_trainer.verl.config as c, ajet\n"
        "from ajet import AgentJetJob\n"
        f"assert c.__file__.startswith({str(target)!r}), c.__file__\n"
        "cfg = c.compose_verl_config(AgentJetJob(n_gpu=1), model_path='/models/m')\n"
        "print(cfg.actor_rollout_ref.rollout.name, cfg.actor_rollout_ref.model.use_remove_padding)\n"
    )
    assert _run_outside(code, target, tmp_path)[-2:] == ["vllm", "True"]


def test_installed_wheel_finds_the_configs_outside_the_checkout(wheels, tmp_path):
    target = _installed(wheels, tmp_path)
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

"""A GPU-less client machine: a venv with the SDK and the servers' `proxy` extra (no torch) runs what the seed runs
there — `ajet-swarm overwatch` against a live proxy, `ajet-swarm new-client`, the SDK, and the proxy itself.

That venv is the one of the docs' wheel install line (`make setup-installs`: the two wheels of the tree, then both
installed, the servers' with `[proxy]`, as docs/usage.md writes it); without it this test fails in CI and is skipped
on a laptop that never built it.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from ajet_store import sqlite_url
from tests.support.installs import venv_of
from tests.support.procs import REPO, Proc, free_port, offline_env

pytestmark = pytest.mark.slow

WHEEL_LINE = "pip wheel"
"""The docs' install line whose venv is the client machine's."""


def client_bin(name: str) -> str:
    """A command of the client venv (the test skips, or fails in CI, when the venv was not built)."""
    return str(venv_of(WHEEL_LINE) / "bin" / name)


def client_run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [client_bin(argv[0]), *argv[1:]], capture_output=True, text=True, timeout=180, cwd=cwd, env=offline_env()
    )


def test_the_client_venv_has_no_torch():
    res = client_run("python", "-c", "import torch")
    assert res.returncode != 0 and "No module named 'torch'" in res.stderr


def test_the_client_venv_runs_the_installed_wheel():
    res = client_run("python", "-c", "import ajet, ajet_store, ajet_proxy; print(ajet.__file__, ajet_store.__file__)")
    assert res.returncode == 0 and all("site-packages" in f for f in res.stdout.split()), res.stdout


def test_client_commands_run_without_torch(tmp_path):
    assert client_run("ajet-swarm", "--version").returncode == 0
    assert "usage:" in client_run("ajet-swarm", "overwatch", "--help").stdout
    res = client_run("ajet-swarm", "new-client", "demo", "--root", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "tutorial" / "opencode_build_demo" / "agent_roll.py").is_file()


def test_proxy_and_monitor_run_in_the_client_venv(tmp_path):
    port = free_port()
    proxy = Proc(
        [
            client_bin("ajet-proxy"),
            "start",
            "--port",
            str(port),
            "--db",
            sqlite_url(tmp_path / "c.db"),
            "--log-level",
            "warning",
        ],
        f"http://127.0.0.1:{port}",
        "/health",
        tmp_path / "proxy.log",
        env=offline_env(),
    )
    try:
        script = textwrap.dedent(f"""
            import asyncio, sys, time
            from ajet import AgentJetJob, SwarmClient
            from ajet_proxy.overwatch import Overwatch

            client = SwarmClient("{proxy.url}")
            client.sync_train_config(AgentJetJob(experiment_name="from-a-laptop"))
            print("job synced:", client.get_engine_status().experiment_name)

            async def main():
                app = Overwatch("{proxy.url}", refresh=0.2)
                async with app.run_test(size=(150, 40)) as pilot:
                    deadline = time.monotonic() + 15
                    while "CONNECTED" not in str(app.query_one("#status").content):
                        assert time.monotonic() < deadline, str(app.query_one("#status").content)
                        await pilot.pause(0.1)
                    print(app.query_one("#status").content)

            asyncio.run(main())
            print("torch loaded:", "torch" in sys.modules)
        """)
        res = client_run("python", "-c", script)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + proxy.log_tail()
        assert "job synced: from-a-laptop" in res.stdout and "engine OFFLINE" in res.stdout
        assert "torch loaded: False" in res.stdout
    finally:
        proxy.close()

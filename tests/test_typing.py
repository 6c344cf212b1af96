"""The interfaces type-check: both sessions are `TrainingSession`s, both engine kinds `Engines`, the store and the
error boundary are typed through (mypy, on the modules that carry those contracts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = pytest.mark.slow

CHECKED = [
    "core/ajet_store",
    "proxy/ajet_proxy/errors.py",
    "proxy/ajet_proxy/app.py",
    "proxy/ajet_proxy/proxy.py",
    "core/ajet_token_history",
    "proxy/ajet_proxy/episode_history.py",
    "proxy/ajet_proxy/open_episodes.py",
    "proxy/ajet_proxy/dataplane",
    "sdk/ajet/protocol.py",
    "sdk/ajet/errors.py",
    "sdk/ajet/client_steps.py",
    "sdk/ajet/client_surface.py",
    "sdk/ajet/client.py",
    "sdk/ajet/async_client.py",
    "trainer/ajet_trainer/interfaces.py",
    "trainer/ajet_trainer/factory.py",
    "trainer/ajet_trainer/registries.py",
    "trainer/ajet_trainer/chat_render.py",
    "trainer/ajet_trainer/template_check.py",
    "core/ajet_core",
    "trainer/ajet_trainer/embedded/engines.py",
    "trainer/ajet_trainer/embedded/session.py",
    "trainer/ajet_trainer/vllm/engines.py",
    "trainer/ajet_trainer/step_record.py",
    "trainer/ajet_trainer/daemon.py",
    "trainer/ajet_trainer/options.py",
    "sdk/ajet/utils/flags.py",
    "proxy/ajet_proxy/cli.py",
    "trainer/ajet_trainer/cli.py",
    "swarm/ajet_swarm/cli.py",
]


def test_contract_modules_type_check():
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", *CHECKED],  # settings: pyproject.toml
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={"MYPYPATH": "sdk:proxy:trainer", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "Success" in res.stdout

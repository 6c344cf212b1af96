"""The interfaces type-check: both sessions are `TrainingSession`s, both engines `Serving`s, the store and the
error boundary are typed through (mypy, on the modules that carry those contracts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = pytest.mark.slow

CHECKED = [
    "proxy/ajet_store",
    "proxy/ajet_proxy/errors.py",
    "proxy/ajet_proxy/app.py",
    "sdk/ajet/protocol.py",
    "sdk/ajet/errors.py",
    "trainer/ajet_trainer/protocols.py",
    "trainer/ajet_trainer/backends.py",
    "trainer/ajet_trainer/serving.py",
    "trainer/ajet_trainer/embedded_session.py",
    "trainer/ajet_trainer/steps.py",
    "trainer/ajet_trainer/daemon.py",
    "trainer/ajet_trainer/options.py",
    "sdk/ajet/utils/flags.py",
    "proxy/ajet_proxy/cli.py",
    "trainer/ajet_trainer/cli.py",
    "proxy/ajet_swarm/cli.py",
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

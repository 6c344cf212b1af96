"""Shared fixtures: a real stub backend, a real proxy on a free port, a real SQLite store."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from ajet.utils.runtime import apply_offline_env

apply_offline_env()

from ajet_store import Store, sqlite_url  # noqa: E402
from tests.support.procs import Proc, start_proxy, start_stub  # noqa: E402

UNIT_LANE_VAR = "AJET_UNIT_LANE"
"""Set to 1 (`make test-fast`): a test that starts a process is skipped when it tries, so what runs runs in this
process (pure functions, the store on a file, the CLIs' parsers); `make test` runs everything."""


@pytest.fixture(scope="session", autouse=True)
def _in_process_lane() -> Iterator[None]:
    """In the in-process lane a test that starts a process is skipped when it tries (session scope: set up before
    any fixture that would start one)."""
    if os.environ.get(UNIT_LANE_VAR) != "1":
        yield
        return
    real = subprocess.Popen

    class NoProcess(subprocess.Popen):  # asyncio's subprocesses come through here too
        def __init__(self, *args: object, **kwargs: object) -> None:
            pytest.skip("starts a process: not in the in-process lane (make test runs it)")

    subprocess.Popen = NoProcess
    try:
        yield
    finally:
        subprocess.Popen = real


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mod")


@pytest.fixture(scope="module")
def stub(module_tmp: Path) -> Iterator[Proc]:
    proc = start_stub(module_tmp)
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def db_url(module_tmp: Path) -> str:
    return sqlite_url(module_tmp / "swarm.db")


@pytest.fixture(scope="module")
def proxy(module_tmp: Path, db_url: str) -> Iterator[Proc]:
    proc = start_proxy(module_tmp, db_url)
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def store(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()

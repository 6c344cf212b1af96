"""Shared fixtures: a real stub backend, a real proxy on a free port, a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ajet.utils.runtime import apply_offline_env

apply_offline_env()

from ajet_store import Store, sqlite_url  # noqa: E402
from tests.support.procs import Proc, start_proxy, start_stub  # noqa: E402


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

"""Shared fixtures: a real stub engine, a real proxy on a free port, a real SQLite store."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from ajet_core.runtime import apply_offline_env

apply_offline_env()

from ajet_store import Store, sqlite_url  # noqa: E402
from tests.support import left_running, soak_run  # noqa: E402
from tests.support.procs import Proc, start_proxy, start_stub  # noqa: E402

LEFT_RUNNING_GRACE_S = float(os.environ.get("AJET_TEST_LEFT_RUNNING_GRACE_S", "20"))
"""How long processes still stopping at the session's end get before they count as left running."""


SLOW_FILES = Path(__file__).with_name("slow_files.txt")


def slow_files() -> list[str]:
    """The suite's slowest files, slowest first (`tests/slow_files.txt`)."""
    paths = (line.split("#", 1)[0].strip() for line in SLOW_FILES.read_text().splitlines())
    return [path for path in paths if path]


FIRST, LAST = "tests/bench/test_soak_start.py", "tests/bench/test_soak.py"
"""The background soak's two files: the one that starts it is dealt first, the one that waits for it last
(`tests/support/soak_run.py`)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest files first, each file's tests in their order (`--dist loadfile --no-loadscope-reorder` deals
    files in this order: the longest ones start first instead of last); the soak's start before them, its wait
    after everything."""
    rank = deal_ranks()
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def deal_ranks() -> dict[str, int]:
    """Each file's place in the dealing order (a file not here comes after the slow ones, before `LAST`)."""
    rank = {path: i for i, path in enumerate(slow_files())}
    return {**rank, FIRST: -1, LAST: len(rank) + 1}


def pytest_configure(config: pytest.Config) -> None:
    """Mark this session's processes (the controller's mark is inherited by the workers and all they start)."""
    os.environ.setdefault(left_running.MARK, uuid.uuid4().hex)
    # rewards a test's swarm could not take are kept in the session's own folder, never the user's cache
    os.environ.setdefault("AJET_KEPT_REWARDS", tempfile.mkdtemp(prefix="ajet-kept-rewards-"))
    if soak_run.SESSION_VAR not in os.environ:  # the controller's (workers inherit it); removed at its end
        os.environ[soak_run.SESSION_VAR] = _made[soak_run.SESSION_VAR] = tempfile.mkdtemp(prefix="ajet-test-session-")


_made: dict[str, str] = {}
"""The session folders this process made (`pytest_unconfigure` removes them)."""


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made.values():
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session (the controller, after its workers) fails if a process a test started is still running: each is
    reported, then ended (`tests.support.left_running`)."""
    if hasattr(session.config, "workerinput") or os.environ.get(UNIT_LANE_VAR) == "1":
        return
    mark = left_running.session_mark()
    left = left_running.wait_for_none(mark, frozenset({os.getpid()}), LEFT_RUNNING_GRACE_S) if mark else []
    if not left:
        return
    left_running.end(left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by the tests were still running at the end (now ended):"]
    lines += [f"  pid {p.pid}: {p.command}" for p in left]
    for line in lines:
        reporter.write_line(line, red=True) if reporter else print(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


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

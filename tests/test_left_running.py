"""The suite's own check that no test leaves a process running (`tests/support/left_running.py`, run at the end of
every session by `tests/conftest.py`): a session whose test leaves a sleeper behind, in a new session and process
group of its own as the vLLM server that was once left was, fails naming it, and the sleeper is ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support import left_running

REPO = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_marked_processes_are_found_and_ended():
    mark = "probe-" + str(time.time_ns())
    env = {**os.environ, left_running.MARK: mark}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)
    try:
        found = left_running.wait_for_none(mark, frozenset(), 0.0)
        assert [p.pid for p in found] == [child.pid] and "time.sleep(600)" in found[0].command
        left_running.end(found)
        child.wait(10)
        assert left_running.marked_processes(mark) == []
    finally:
        child.kill()


def test_a_session_that_leaves_a_process_fails_and_ends_it(tmp_path: Path):
    pid_file = tmp_path / "sleeper.pid"
    env = {k: v for k, v in os.environ.items() if k != left_running.MARK}  # a session of its own, with its own mark
    env |= {"AJET_TEST_LEAK_PID_FILE": str(pid_file), "AJET_TEST_LEFT_RUNNING_GRACE_S": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/support/leaks_a_process.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    pid = int(pid_file.read_text())
    assert run.returncode == 1, run.stdout
    assert "1 passed" in run.stdout and "still running at the end (now ended)" in run.stdout
    assert f"pid {pid}: " in run.stdout and "time.sleep(600)" in run.stdout
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)

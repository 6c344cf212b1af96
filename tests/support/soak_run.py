"""`make test`'s ten-minute soak, run beside the other tests rather than holding a worker for ten minutes (its paced
load leaves that worker's core idle): tests/bench/test_soak_start.py, dealt first, starts `bench.soak` in a process of
its own; tests/bench/test_soak.py, dealt last, waits for its row. Run alone, the waiting test starts it itself. The
soak's folder is the session's (`SESSION_VAR`, set by tests/conftest.py and inherited by the workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ajet_trainer.daemon import pid_alive
from tests.support.procs import REPO, offline_env

SESSION_VAR = "AJET_TEST_SESSION_DIR"
"""A folder of the test session's own, shared by its workers."""
ARGS = ["--minutes", "10", "--sample-every", "60", "--warmup-min", "2", "--pace", "1"]
"""Paced (a thread waits a second after each episode): what leaks, leaks at any rate; unpaced (35 calls a second)
it would take both of CI's cores from the other tests for the ten minutes."""
_started: list[subprocess.Popen[bytes]] = []  # this worker's soak, reaped when it ends


def folder() -> Path:
    return Path(os.environ[SESSION_VAR]) / "soak"


def start() -> bool:
    """Start the session's soak unless a worker did; True if this call started it."""
    try:
        folder().mkdir(parents=True)
    except FileExistsError:
        return False
    cmd = [sys.executable, "-m", "bench.soak", *ARGS, "--out", str(folder() / "row.json")]
    with open(folder() / "soak.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=offline_env(AJET_BENCH_RESULTS="0")
        )
    (folder() / "pid").write_text(str(proc.pid))
    _started.append(proc)
    return True


def row(timeout: float = 1500) -> dict[str, Any]:
    """The soak's row once it ends (started here if no worker did); its log's tail if it ended without one."""
    start()
    out, deadline = folder() / "row.json", time.monotonic() + timeout
    while not (folder() / "pid").is_file():  # the starting worker writes it just after the start
        assert time.monotonic() < deadline, f"the soak was never started: {folder()} holds no pid"
        time.sleep(0.5)
    pid = int((folder() / "pid").read_text())
    while not out.is_file() and pid_alive(pid) and time.monotonic() < deadline:  # a zombie is not alive
        for proc in _started:
            proc.poll()
        time.sleep(2.0)
    time.sleep(0.5)  # a row written as the process ended
    assert out.is_file(), (folder() / "soak.log").read_text()[-4000:]
    return json.loads(out.read_text())

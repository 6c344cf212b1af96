"""No test leaves a process of the project running (issue 53: a fresh clone's `make test` once left a vLLM server
using 4.2 GB for 95 minutes, its parent PID 1).

The test session marks its environment (`MARK`, a fresh value per session), and every process a test starts (a
proxy, a trainer, the vLLM server a trainer starts, Ray's processes, a browser) inherits the mark. At the session's
end (`tests/conftest.py`), `marked_processes` finds the marked processes still alive other than the session's
own; each is reported, then ended, and the session fails.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

MARK = "AJET_TEST_SESSION"
"""The environment variable that marks the processes of one test session (its value: that session's id)."""


@dataclass(frozen=True)
class LeftRunning:
    """A marked process still running."""

    pid: int
    command: str
    """Its command line (the first 300 characters)."""


def marked_processes(mark: str, spare: frozenset[int] = frozenset()) -> list[LeftRunning]:
    """Processes alive whose environment carries `MARK=mark`, but for `spare` (zombies have no environment)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spare:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(LeftRunning(int(entry.name), command[:300]))
    return found


def wait_for_none(mark: str, spare: frozenset[int], grace_s: float) -> list[LeftRunning]:
    """The marked processes still alive after up to `grace_s` seconds (processes being stopped get that long)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = marked_processes(mark, spare)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def end(left: list[LeftRunning]) -> None:
    """SIGKILL each (what a test should have stopped)."""
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass


def session_mark() -> Optional[str]:
    """This session's mark, if it set one."""
    return os.environ.get(MARK)

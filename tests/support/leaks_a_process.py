"""A test that leaves a process running (not collected by the suite: `tests/test_left_running.py` runs it in a session
of its own, which must then fail and end the process). The sleeper's pid goes to `$AJET_TEST_LEAK_PID_FILE`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_leaves_a_sleeper_behind() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    Path(os.environ["AJET_TEST_LEAK_PID_FILE"]).write_text(str(sleeper.pid))

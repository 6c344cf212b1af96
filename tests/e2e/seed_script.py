"""Run an original AgentJet client script with only its constants changed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.procs import REPO, offline_env


def with_constants(source: Path, dest: Path, **constants: Any) -> Path:
    """Copy `source` to `dest`, replacing each top-level `NAME = ...` assignment given."""
    text = source.read_text()
    for name, value in constants.items():
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", text, count=1, flags=re.M)
        assert n == 1, f"constant {name} not found in {source}"
    dest.write_text(text)
    return dest


def run_script(path: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a client script as a user would (`python script.py`)."""
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=offline_env(PYTHONPATH=str(REPO)),
        cwd=path.parent,
    )

"""What every results row carries, written by the code that measured it: the commit of the checkout (`-dirty` with
uncommitted changes), the date, the machine and the command line (relative to the repository). The benches
(`bench/results.py`) and the GPU box's scripts stamp their rows with it; nothing here imports the benches.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The checkout's root."""
RESULTS = REPO / "bench" / "results"
"""The folder of the benches' results files (a change there is a row appended, not a change of the code)."""


def commit() -> str:
    """The short commit of the checkout the bench runs from, `-dirty` when tracked files other than the results
    differ from it."""
    repo = REPO
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        # rows appended by a run are not a change of the code that wrote them
        exclude = f":(exclude){RESULTS.relative_to(repo)}"
        dirty = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", ".", exclude],
                               capture_output=True).returncode  # fmt: skip
    except (OSError, subprocess.CalledProcessError):  # no git: a lent GPU box gets a copy of the tree
        return os.environ.get("AJET_COMMIT") or "unknown"  # written where the tree was copied from (gpu_carry.py)
    return f"{sha}-dirty" if dirty else sha


def machine() -> str:
    """What the bench ran on: the processor's model name, its cores, the memory and the OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0.0
    return f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()}"


def stamp() -> dict[str, str]:
    """What every results row carries, written by the code that measured it: commit, date, machine, command line."""
    return {"commit": commit(), "date": datetime.date.today().isoformat(), "machine": machine(),
            "command": command_line(sys.argv)}  # fmt: skip


def command_line(argv: list[str]) -> str:
    """The command as run from the repository's root: a script of the checkout named by its path relative to it, so
    a row carries no machine's folders."""
    script = Path(argv[0]) if argv else Path()
    repo = REPO
    if script.is_absolute() and script.is_relative_to(repo):
        script = script.relative_to(repo)
    return " ".join(["python", str(script), *argv[1:]]) if argv else "python"

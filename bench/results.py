"""Where a bench's figures go: each printed as one JSON line and appended to `bench/results/<bench>.jsonl`, with the
commit it measured, the date, the machine and the command line, so every figure the docs quote can be traced to the
row that holds it.

A commit with uncommitted changes in tracked files is written `<sha>-dirty`: a row measured on a work in progress
says so. `AJET_BENCH_RESULTS=0` prints without appending (a trial run that should leave no row).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""The folder of the results files, one per bench."""


def commit() -> str:
    """The short commit of the checkout the bench runs from, `-dirty` when tracked files other than the results
    differ from it."""
    repo = RESULTS.parent.parent
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
    repo = RESULTS.parent.parent
    if script.is_absolute() and script.is_relative_to(repo):
        script = script.relative_to(repo)
    return " ".join(["python", str(script), *argv[1:]]) if argv else "python"


class Results:
    """The rows of one bench run: `emit` prints a figure and appends it, stamped with the run's commit and date."""

    def __init__(self, bench: str):
        self.path = RESULTS / f"{bench}.jsonl"
        self.stamp = stamp()
        self.record = os.environ.get("AJET_BENCH_RESULTS", "1") != "0"

    def emit(self, row: dict[str, Any]) -> None:
        """Print one figure's row with the commit and date; append it so to the bench's results file."""
        stamped = json.dumps({**row, **self.stamp})
        print(stamped, flush=True)  # as stored: a row copied from a run's output carries its stamp too
        if self.record:
            with self.path.open("a") as f:
                f.write(stamped + "\n")


_RUNS: dict[str, Results] = {}


def emit(bench: str, row: dict[str, Any]) -> None:
    """Print and append one figure's row of `bench` (one `Results`, so one commit and date, per bench and run)."""
    if bench not in _RUNS:
        _RUNS[bench] = Results(bench)
    _RUNS[bench].emit(row)

"""Where a bench's figures go: each printed as one JSON line and appended to `bench/results/<bench>.jsonl`, with the
commit it measured, the date, the machine and the command line, so every figure the docs quote can be traced to the
row that holds it.

A commit with uncommitted changes in tracked files is written `<sha>-dirty`: a row measured on a work in progress
says so. `AJET_BENCH_RESULTS=0` prints without appending (a trial run that should leave no row).
"""

from __future__ import annotations

import json
import os
from typing import Any

from scripts.stamp import RESULTS, stamp


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

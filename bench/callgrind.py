"""Instructions a process runs, counted by valgrind's callgrind: a quiet stand-in for its CPU seconds.

CPU seconds on a shared VM move by a tenth between two runs of the same code; the instructions a process retires
move by about a percent, because they do not count the time the process waited for a cache, a neighbour or the
hypervisor. They are not the same figure (a change that misses the cache more costs time, not instructions), so a
bench quotes both. `perf stat -e instructions` would count them at full speed, but a VM without the hardware
counters says `<not supported>`; callgrind counts them in software, at about ten times the CPU.

A process is started under `prefix()`, with counting off while it imports and starts (about five times slower);
`start(pid)` turns counting on; `read(pid)` is the instructions counted so far, a cumulative reading like CPU
seconds, so `read` after minus `read` before is what ran in between.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass
class _Counting:
    """One process's counting since `start`."""

    name: str
    """The name its dumps are written under."""
    dumps: int = 0
    """Dumps read so far."""
    instructions: int = 0
    """Instructions counted in them."""


class Callgrind:
    """The instruction counts of the processes started under `prefix()`, their dumps kept in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._counting: dict[int, _Counting] = {}  # by pid

    def prefix(self, name: str) -> list[str]:
        """The command line to put before a process's own: callgrind, counting nothing until `start`."""
        out = self.folder / f"callgrind.{name}"
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", "--quiet"]

    def start(self, pid: int, name: str) -> None:
        """Count from now on (what ran before, the imports and the start-up, is not counted)."""
        self._control(pid, "--instr=on")
        self._counting[pid] = _Counting(name)

    def read(self, pid: Optional[int]) -> float:
        """Instructions process `pid` has run since `start` (every thread; 0 for None)."""
        if pid is None:
            return 0.0
        self._control(pid, "--dump")  # writes what was counted since the last dump, then counts from zero
        counting = self._counting[pid]
        counting.dumps += 1
        dump = self.folder / f"callgrind.{counting.name}.{counting.dumps}"
        counting.instructions += summary(dump)
        dump.unlink()
        return float(counting.instructions)

    @staticmethod
    def _control(pid: int, option: str) -> None:
        subprocess.run(["callgrind_control", option, str(pid)], capture_output=True, check=True)


def summary(dump: Path) -> int:
    """The instructions a callgrind dump counts (its `summary:` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise ValueError(f"{dump} has no summary line")

"""The instruction meter (`bench/callgrind.py`) on a real process under valgrind: it counts what the process ran
between two readings, from `start` on, and twice the work reads as twice the count."""

import subprocess
import sys
from pathlib import Path

from bench.callgrind import Callgrind

WORKER = """
import sys
for line in sys.stdin:
    total = 0
    for i in range(int(line)):
        total += i * i
    print(total, flush=True)
"""


def work(proc: subprocess.Popen, n: int) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    assert int(proc.stdout.readline()) == sum(i * i for i in range(n))


def test_a_reading_counts_the_work_in_between(tmp_path: Path):
    cg = Callgrind(tmp_path)
    args = [*cg.prefix("worker"), sys.executable, "-c", WORKER]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        work(proc, 1000)  # the interpreter is up and waiting for a line
        cg.start(proc.pid, "worker")
        r0 = cg.read(proc.pid)
        work(proc, 100_000)
        r1 = cg.read(proc.pid)
        work(proc, 200_000)
        r2 = cg.read(proc.pid)
        r3 = cg.read(proc.pid)  # nothing ran in between but the wait for a line
    finally:
        proc.kill()
        proc.wait()
    once, twice = r1 - r0, r2 - r1
    assert once > 1_000_000  # some tens of instructions a loop turn
    assert 1.8 < twice / once < 2.2
    assert r3 - r2 < once / 100
    assert cg.read(None) == 0.0
    assert not list(tmp_path.glob("callgrind.worker.*"))  # each dump read and removed

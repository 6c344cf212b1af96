"""The chaos soak's swarm and the faults thrown at it.

PostgreSQL runs with its data on a small tmpfs of its own (so its disk can be filled), `ajet-proxy start
--workers 2` serves on it, and `ajet-trainer start` trains beside it; the soak restarts the trainer after a kill,
as a supervisor would (`ajet-swarm start` stops when a child dies). Each fault is one method; `FAULTS` names them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil

from tests.support.postgres import PgServer, fresh_database
from tests.support.procs import Child, Proc, free_port

FAULTS = ("proxy_worker_kill", "trainer_kill", "trainer_stop", "pg_restart", "disk_full", "flood")
"""Every fault of the schedule, each thrown at least once a soak (in a seeded order)."""
PG_SETTINGS = "-c max_wal_size=256MB -c min_wal_size=64MB"
"""The WAL kept within the soak's disk, so only the `disk_full` fault fills it."""
STOP_S, DOWN_S, FULL_S = 20.0, 5.0, 10.0
"""How long the trainer stays stopped (SIGSTOP), PostgreSQL or a killed trainer stays down, and the disk full."""


def mount_tmpfs(where: Path, size_mb: int) -> None:
    """A tmpfs of `size_mb` at `where`, owned by PostgreSQL's user (root and `mount` needed: said plainly)."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the chaos soak mounts a tmpfs for PostgreSQL (root and mount): {done.stderr.strip()}")
    shutil.chown(where, "postgres")


class Cluster:
    """PostgreSQL on a tmpfs, two proxy workers and a trainer; `close` ends them all."""

    def __init__(self, tmp: Path, disk_mb: int = 1024):
        self.tmp, self.disk = tmp, tmp / "pgdisk"
        tmp.chmod(0o755)  # PostgreSQL's own user reaches its data through this folder
        mount_tmpfs(self.disk, disk_mb)
        self.pg = PgServer(root=str(self.disk), settings=PG_SETTINGS)
        self.db = fresh_database(self.pg.url, "chaos")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proxy = Proc([sys.executable, "-m", "ajet_proxy.cli", "start", "--workers", "2", "--db", self.db,
                           "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning"],
                          self.url, "/health", tmp / "proxy.log")  # fmt: skip
        self.trainer = self._trainer()
        self.events: list[tuple[float, str]] = []
        """(time, what) of every fault thrown and undone."""

    def _trainer(self) -> Child:
        args = [sys.executable, "-m", "ajet_trainer.cli", "start", "--db", self.db, "--device", "cpu",
                "--experiment-dir", str(self.tmp / "exp"), "--log-level", "info"]  # fmt: skip
        return Child(args, self.tmp / "trainer.log")

    def _say(self, what: str) -> None:
        self.events.append((time.time(), what))

    def fault(self, name: str, flood: Callable[[float], None]) -> None:
        """Throw the fault `name` and undo it (the flood: `flood(seconds)` runs it)."""
        self._say(name)
        if name == "flood":
            flood(30.0)
        else:
            getattr(self, name)()
        self._say(f"{name} undone")

    def proxy_worker_kill(self) -> None:
        """SIGKILL one proxy worker; the proxy starts it again."""
        workers = psutil.Process(self.proxy.pid).children()
        if workers:
            workers[0].send_signal(signal.SIGKILL)

    def trainer_kill(self) -> None:
        """SIGKILL the trainer; a new one starts after `DOWN_S`, as a supervisor would start it."""
        self.trainer.kill()
        time.sleep(DOWN_S)
        self.trainer = self._trainer()

    def trainer_stop(self) -> None:
        """SIGSTOP the trainer for `STOP_S` (a hang), then SIGCONT."""
        os.kill(self.trainer.pid, signal.SIGSTOP)
        time.sleep(STOP_S)
        os.kill(self.trainer.pid, signal.SIGCONT)

    def pg_restart(self) -> None:
        """PostgreSQL stopped (`fast`: clients dropped), down `DOWN_S`, started again."""
        self.pg.stop("fast")
        time.sleep(DOWN_S)
        self.pg.start()

    def disk_full(self) -> None:
        """PostgreSQL's disk full for `FULL_S`, then room again."""
        filler = self.disk / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        time.sleep(FULL_S)
        filler.unlink()

    def close(self) -> None:
        self.trainer.close(30)
        self.proxy.close(30)
        self.pg.close()
        subprocess.run(["umount", "-l", str(self.disk)], capture_output=True)

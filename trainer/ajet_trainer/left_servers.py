"""vLLM servers a trainer left running: found by the records written at their launch, ended by a later trainer.

A trainer launches each vLLM server in a process group of its own (vLLM's engine processes with it) and records it
twice: `vllm-N.pid` beside its log in the experiment's folder, and `<pid>.json` (with the trainer's pid) in the
machine's record folder (`records_root`). A SIGKILLed trainer never stops its servers, and on a GPU they hold the
memory a new one needs. The next boot of the same experiment ends the servers of its folder (`end_left_servers`),
and the next start of any trainer on the machine ends every recorded server whose trainer is gone
(`end_orphaned_servers`). A record whose pid runs another command now (the pid was reused) is dropped, never acted
on; a server of a trainer still alive is left alone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

IPC_PREFIX = "ajet-vllm-ipc-"
"""The name each server's folder of IPC sockets starts with (`ipc_folder`); only such a folder is ever removed."""


def ipc_folder() -> Path:
    """A fresh folder for one server's IPC sockets (vLLM's `VLLM_RPC_BASE_PATH`), in the machine's temp folder."""
    return Path(tempfile.mkdtemp(prefix=IPC_PREFIX))


def records_root() -> Path:
    """The machine's record folder of launched servers (`AJET_SERVER_RECORDS`, else `~/.cache/agentjet/servers`)."""
    return Path(os.environ.get("AJET_SERVER_RECORDS", Path.home() / ".cache" / "agentjet" / "servers"))


def record(pid: int, cmd: list[str], pid_path: Path, ipc_dir: Optional[Path] = None) -> None:
    """Record a server this trainer launched: beside its log, and in the machine's record folder (`ipc_dir`: the
    folder of its IPC sockets, removed with the records)."""
    ipc = None if ipc_dir is None else str(ipc_dir)
    pid_path.write_text(json.dumps({"pid": pid, "cmd": cmd, "ipc_dir": ipc}))
    root = records_root()
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{pid}.json").write_text(json.dumps({"pid": pid, "cmd": cmd, "trainer_pid": os.getpid(), "ipc_dir": ipc}))


def forget(pid: int, pid_path: Path) -> None:
    """Drop both records of a server that stopped, and the folder of its IPC sockets (vLLM leaves them behind when
    it is killed: `/tmp` once held 1,430 of them)."""
    for path in (pid_path, records_root() / f"{pid}.json"):
        _drop(path)


def _drop(path: Path) -> None:
    """Remove one record and the IPC folder it names."""
    try:
        ipc = json.loads(path.read_text()).get("ipc_dir")
    except (OSError, ValueError, AttributeError):
        ipc = None
    if isinstance(ipc, str) and Path(ipc).name.startswith(IPC_PREFIX):  # only a folder a launch made
        shutil.rmtree(ipc, ignore_errors=True)
    path.unlink(missing_ok=True)


def end_left_servers(exp_dir: Path) -> None:
    """End the vLLM servers an earlier trainer launched for this experiment and left running: each `vllm-*.pid` of
    `exp_dir` whose process still runs the command recorded with it and is not this process's child, with its
    process group, SIGTERM then SIGKILL."""
    for pid_path in sorted(exp_dir.glob("vllm-*.pid")):
        found = _read(pid_path)
        if found is None:
            continue
        pid, cmd, _ = found
        if _cmdline(pid) == cmd:
            if _parent(pid) == os.getpid():
                continue  # a server of this trainer's: its record stays
            logger.warning("ending the vLLM server %d an earlier trainer left running (%s)", pid, pid_path)
            _end_group(pid, cmd)
        forget(pid, pid_path)


def end_orphaned_servers() -> int:
    """End every recorded server on this machine whose trainer is gone (any experiment's); returns how many."""
    ended, root = 0, records_root()
    for path in sorted(root.glob("*.json")):  # none when the folder is not there
        found = _read(path)
        if found is None:
            path.unlink(missing_ok=True)
            continue
        pid, cmd, trainer = found
        if _cmdline(pid) != cmd:  # stopped (or the pid runs something else now): only the record is left
            _drop(path)
        elif trainer is not None and trainer != os.getpid() and _cmdline(trainer) is None:
            logger.warning("ending the vLLM server %d its trainer %d left running", pid, trainer)
            _end_group(pid, cmd)
            _drop(path)
            ended += 1
    return ended


def _read(path: Path) -> Optional[tuple[int, list[str], Optional[int]]]:
    """(pid, command, trainer pid) of a record, None when it cannot be read."""
    try:
        record = json.loads(path.read_text())
        trainer = record.get("trainer_pid")
        return int(record["pid"]), [str(part) for part in record["cmd"]], None if trainer is None else int(trainer)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _end_group(pid: int, cmd: list[str]) -> None:
    """SIGTERM the process group of `pid` (vLLM stops its engine processes), then SIGKILL what is left of it."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _cmdline(pid) == cmd:
            time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)  # engine processes the server left behind
    except ProcessLookupError:
        pass


def _cmdline(pid: int) -> Optional[list[str]]:
    """The command line process `pid` runs (Linux's /proc; empty for a zombie), None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1]


def _parent(pid: int) -> Optional[int]:
    """The parent pid of process `pid` (Linux's /proc), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])

"""What the long soak measures of a running swarm, and the trend of each measure.

A sample holds, for each process role (`proxy`, `trainer`, `client`: the soak's own process, whose SDK clients play
the load), its process tree's resident memory, open file descriptors and threads, and the swarm's files: the
store's size, the checkpoint folder's size and the entries of the temporary folder its processes were given (and of
the machine's `/tmp`, which other programs share). `trend` fits a line through a series after the warm-up: its slope
per hour and per million answered calls. `leftovers` is what must not outlive its owner once the swarm is stopped
or idle: a descriptor of a deleted file, a socket its peer closed (CLOSE_WAIT), an entry of the temporary folder.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import psutil

MIB = 1 << 20


@dataclass(frozen=True)
class Sample:
    """One look at the swarm."""

    at_s: float
    """Seconds since the load started."""
    calls: int
    """Calls answered to the soak's clients so far."""
    values: dict[str, float]
    """Series name -> value: `<role>_rss_mib`, `<role>_fds`, `<role>_threads`, `store_mib`, `checkpoints_mib`,
    `tmp_entries` (the swarm's temporary folder), `system_tmp_entries` (the machine's, shared: noise)."""


def tree(pid: int) -> list[psutil.Process]:
    """A process and its descendants alive now (a proxy's workers, a trainer's engine servers)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def process_values(role: str, pid: int) -> dict[str, float]:
    """The resident memory (MiB), open descriptors and threads of `pid`'s process tree, summed."""
    rss = fds = threads = 0
    for p in tree(pid):
        try:
            with p.oneshot():
                rss += p.memory_info().rss
                fds += p.num_fds()
                threads += p.num_threads()
        except psutil.NoSuchProcess:
            continue  # a child that ended between the listing and the look
    return {f"{role}_rss_mib": round(rss / MIB, 2), f"{role}_fds": float(fds), f"{role}_threads": float(threads)}


def folder_mib(path: Path, pattern: str = "**/*") -> float:
    """The size of the files under `path` matching `pattern`, in MiB (0 for a folder not made yet)."""
    total = 0
    for f in path.glob(pattern):
        try:
            if f.is_file():
                total += f.stat().st_size
        except FileNotFoundError:
            continue  # removed while listed (a checkpoint pruned)
    return round(total / MIB, 3)


def entries(path: Path) -> int:
    """The entries directly under `path`."""
    try:
        return len(os.listdir(path))
    except FileNotFoundError:
        return 0


def take(at_s: float, calls: int, roles: dict[str, int], store: Path, checkpoints: Path, tmp: Path) -> Sample:
    """One sample: `roles` maps a role to its root process; `store` is the folder of the swarm's store files."""
    values: dict[str, float] = {}
    for role, pid in roles.items():
        values.update(process_values(role, pid))
    values["store_mib"] = folder_mib(store, "*.db*")
    values["checkpoints_mib"] = folder_mib(checkpoints)
    values["tmp_entries"] = float(entries(tmp))
    values["system_tmp_entries"] = float(entries(Path(tempfile.gettempdir())))
    return Sample(round(at_s, 1), calls, values)


def slope(xs: list[float], ys: list[float]) -> Optional[float]:
    """The least-squares slope of ys over xs, or None with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def trend(samples: list[Sample], name: str, warmup_s: float) -> dict[str, Optional[float]]:
    """A series' first, last and largest value, and its slope per hour and per million calls after `warmup_s`
    (the warm-up's growth, caches filling and the allocator's first arenas, is not a leak's)."""
    ys = [s.values[name] for s in samples if name in s.values]
    kept = [s for s in samples if s.at_s >= warmup_s and name in s.values]
    per_s = slope([s.at_s for s in kept], [s.values[name] for s in kept])
    per_call = slope([float(s.calls) for s in kept], [s.values[name] for s in kept])
    return {
        "first": ys[0] if ys else None,
        "last": ys[-1] if ys else None,
        "max": max(ys) if ys else None,
        "per_hour": None if per_s is None else round(per_s * 3600, 3),
        "per_million_calls": None if per_call is None else round(per_call * 1e6, 3),
    }


def trends(samples: list[Sample], warmup_s: float) -> dict[str, dict[str, Optional[float]]]:
    """Every series' trend."""
    names = sorted({name for s in samples for name in s.values})
    return {name: trend(samples, name, warmup_s) for name in names}


def deleted_files(pids: Iterable[int]) -> list[str]:
    """Descriptors the processes hold to files already deleted (a temporary file nobody closed)."""
    out = []
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            links = list(fd_dir.iterdir())
        except (FileNotFoundError, PermissionError):
            continue
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target.endswith(" (deleted)") and not target.startswith("/memfd:"):
                out.append(f"{pid}: {target}")
    return out


def close_waits(pids: Iterable[int]) -> list[str]:
    """TCP sockets whose peer closed and the process did not (CLOSE_WAIT): a connection leaked."""
    out = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        out += [f"{pid}: {c.laddr} -> {c.raddr}" for c in conns if c.status == psutil.CONN_CLOSE_WAIT]
    return out


def leftovers(roles: dict[str, int]) -> dict[str, list[str]]:
    """What a swarm at rest must not hold: descriptors of deleted files and CLOSE_WAIT sockets, by kind."""
    pids = [p.pid for pid in roles.values() for p in tree(pid)]
    return {"deleted_files": deleted_files(pids), "close_wait": close_waits(pids)}

"""A whole swarm from Python: `ajet-swarm start` on a free loopback port, waited for, and stopped on exit.

    with launched_swarm(Path("experiments/try")) as url:
        SwarmClient(url)...

What `make demo`, the benchmarks and notebooks use to run proxy + trainer without a terminal of their own. The
store (`ajet-swarm.db`), the experiment folder (`experiment/`) and the log (`swarm.log`) go under `root`.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Optional

import httpx

from ajet_core.runtime import offline_env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: "subprocess.Popen[bytes]", log: Path, timeout: float) -> None:
    """Poll `url/health` until it answers 200; `RuntimeError` with the log's tail if `proc` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the swarm did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@contextmanager
def launched_swarm(
    root: Path, *extra: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120.0
) -> Iterator[str]:
    """`ajet-swarm start` on 127.0.0.1 and a free port with its store and experiment under `root` (`extra`: more
    flags of `ajet-swarm start`; `env`: more environment); yields the swarm's URL, and stops it (SIGINT, then
    SIGKILL after 60 s) on exit."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(Path(sys.executable).with_name("ajet-swarm")), "start", "--host", "127.0.0.1", "--swarm-port",
           str(port), "--db", f"sqlite:///{root / 'ajet-swarm.db'}", "--experiment-dir", str(root / "experiment"),
           "--log-level", "warning", *extra]  # fmt: skip
    log_path = root / "swarm.log"
    with open(log_path, "w") as log:
        swarm = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=offline_env(**(env or {})))
        try:
            wait_healthy(url, swarm, log_path, timeout)
            yield url
        finally:
            swarm.send_signal(signal.SIGINT)
            try:
                swarm.wait(60)
            except subprocess.TimeoutExpired:
                swarm.kill()
                swarm.wait()

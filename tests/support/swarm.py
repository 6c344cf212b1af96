"""A whole running swarm for end-to-end tests: `ajet-proxy` + `ajet-trainer` on a fresh SQLite store.

One of the two swarm harnesses, for what needs the real trainer (boots, training steps, checkpoints, restarts,
vLLM and verl engines). The other, `scripted_swarm`, scripts what the policy says instead, for what depends on
the answer's text (the APIs, the frameworks' tool loops, token history): no trainer, no step. A proxy alone is
`stub_proxy.proxy_on_stub` (a stub engine whose flags a test sets) or `in_process.proxy_in_process` (no process:
the unit lane).

    with running_swarm(tmp_path) as sw:
        sw.run_module("tutorial.example_tiny_rl.agent_roll", "--swarm-url", sw.url, "--max-steps", "1")
        assert sw.store().steps()

On exit every trainer, the proxy, every client and every `Store` the test opened through it are closed,
whatever the test did (a killed trainer included).
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Union

from ajet import SwarmClient
from ajet_store import Store, sqlite_url
from tests.support.procs import REPO, Proc, Trainer, offline_env, start_proxy


class Swarm:
    """One proxy and its trainers on one store, plus what the test opens against them."""

    def __init__(self, tmp: Path, name: str, proxy_args: tuple[str, ...]):
        self.tmp = tmp
        self.db_url = sqlite_url(tmp / f"{name}.db")
        self.exp_dir = tmp / f"exp_{name}"
        self.proxy: Proc = start_proxy(tmp, self.db_url, *proxy_args)
        self.trainers: list[Trainer] = []
        self._stores: list[Store] = []
        self._clients: list[SwarmClient] = []

    @property
    def url(self) -> str:
        """The proxy's base URL (what `--swarm-url` takes)."""
        return self.proxy.url

    @property
    def trainer(self) -> Trainer:
        """The newest trainer."""
        return self.trainers[-1]

    def start_trainer(
        self, engine: str = "embedded", backend: str = "auto", extra: tuple[str, ...] = (), **env: str
    ) -> Trainer:
        """Start a trainer on the store (after a kill, this is the restart); `extra`: more `ajet-trainer start`
        flags."""
        tr = Trainer(self.tmp, self.db_url, self.exp_dir, engine=engine, backend=backend, extra=extra, **env)
        self.trainers.append(tr)
        return tr

    def store(self) -> Store:
        """A store handle on the swarm's database, closed when the swarm stops."""
        st = Store(self.db_url)
        self._stores.append(st)
        return st

    def client(self, **kw: Any) -> SwarmClient:
        """A `SwarmClient` of the proxy, closed when the swarm stops."""
        c = SwarmClient(self.url, **kw)
        self._clients.append(c)
        return c

    def run_module(
        self, module: str, *args: str, timeout: float = 300, root: Union[Path, str] = REPO
    ) -> subprocess.CompletedProcess[str]:
        """`python -m module args` from `root` (the import root of `module`), offline, output captured."""
        return subprocess.run(
            [sys.executable, "-m", module, *args],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=timeout,
            env=offline_env(PYTHONPATH=str(root)),
        )

    def popen_module(self, module: str, *args: str, stdout: Optional[IO[str]] = None) -> "subprocess.Popen[str]":
        """`python -m module args` in the background (stdout and stderr together)."""
        return subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=stdout or subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=offline_env(PYTHONPATH=str(REPO)),
        )

    def logs(self) -> str:
        """The newest trainer's and the proxy's log tails, for assertion messages."""
        tail = self.trainer.log_tail() if self.trainers else ""
        return f"--- trainer\n{tail}\n--- proxy\n{self.proxy.log_tail()}"

    def close(self) -> None:
        for c in self._clients:
            c.close()
        for st in self._stores:
            st.close()
        for tr in self.trainers:
            tr.close()
        self.proxy.close()


@contextmanager
def running_swarm(
    tmp_path: Path,
    *,
    name: str = "swarm",
    trainer: bool = True,
    engine: str = "embedded",
    backend: str = "auto",
    proxy_args: tuple[str, ...] = (),
    trainer_args: tuple[str, ...] = (),
    **trainer_env: str,
) -> Iterator[Swarm]:
    """A proxy (and, unless `trainer=False`, a trainer) on a fresh store; everything closed on exit."""
    sw = Swarm(tmp_path, name, proxy_args)
    try:
        if trainer:
            sw.start_trainer(engine=engine, backend=backend, extra=trainer_args, **trainer_env)
        yield sw
    finally:
        sw.close()

"""`ajet-proxy start --workers N`: N proxy processes on one listening socket, as uvicorn's own workers share one.

The socket is bound once, by the parent, before anything says it listens; each worker is forked before any
thread or event loop exists, builds its own app (its own store connections, call-log thread, connection pool to
the engines) and accepts on the shared socket, so the kernel spreads connections over them. The workers share the store
(`ProxyConfig.shared`): an episode begun through one is called and ended through any other. The parent only
supervises: SIGTERM / SIGINT is passed on to every worker, and a worker that dies on its own is started
again (its clients' next calls go to the others meanwhile), with one log line saying so.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from typing import Callable

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S = 1.0
"""Pause before a dead worker is started again (a worker that dies at once does not spin the parent)."""


def serve_workers(n: int, sock: socket.socket, serve: Callable[[socket.socket], None]) -> int:
    """Run `serve(sock)` in `n` forked workers until SIGTERM / SIGINT; returns the exit status (0 when stopped,
    else the status of a worker that failed at its start)."""
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    workers = {_fork(sock, serve): i for i in range(n)}
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while workers and not stopping:
        pid, status = _wait_any()
        if pid == 0:
            continue
        index = workers.pop(pid, None)
        if index is None or stopping:
            continue
        logger.warning("proxy worker %d (pid %d) %s; starting it again", index, pid, _how(status))
        time.sleep(RESTART_BACKOFF_S)
        if not stopping:
            workers[_fork(sock, serve)] = index
    for pid in workers:
        _signal(pid, signal.SIGTERM)
    for pid in list(workers):
        os.waitpid(pid, 0)
    return 0


def _fork(sock: socket.socket, serve: Callable[[socket.socket], None]) -> int:
    pid = os.fork()
    if pid == 0:  # the worker: default signal handling (uvicorn installs its own), serve, never return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        code = 0
        try:
            serve(sock)
        except BaseException:  # noqa: BLE001 - a worker reports and exits; the parent decides
            logger.exception("proxy worker %d failed", os.getpid())
            code = 1
        os._exit(code)
    return pid


def _wait_any() -> tuple[int, int]:
    """(pid, status) of a worker that ended, or (0, 0) when the wait was interrupted or timed out."""
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0
    if pid == 0:
        time.sleep(0.2)
    return pid, status


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

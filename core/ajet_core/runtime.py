"""What every command of the swarm does the same way: the offline environment and its error line.

- `offline_env()`: nothing may download a model, a dataset or LiteLLM's cost map at run time.
  `apply_offline_env()` sets those variables in this process (keeping values already set);
  `offline_env(**extra)` is the environment for a child process.
- `run_cli(prog, main, argv, expected)`: an expected error (a bad store URL, an unknown episode, a
  store of another schema) prints one line `prog: error: ...` and exits 1, never a traceback.
- `listening_socket(host, port)`: the server socket, bound before a command says it listens (`CannotListen`
  naming the address when it cannot be had).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from ajet.errors import CannotListen

OFFLINE_ENV: Mapping[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",  # a local Ray (the verl backend) reports usage stats online otherwise
}
"""Variables that keep Hugging Face, LiteLLM and Ray from reaching the network."""


def apply_offline_env() -> None:
    """Set the offline variables in this process, keeping any value the user set."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)


def offline_env(**extra: str) -> dict[str, str]:
    """This process's environment with the offline variables forced, plus `extra`: for child processes."""
    return {**os.environ, **OFFLINE_ENV, **extra}


def error_line(exc: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_cli(
    prog: str,
    main: Callable[[Optional[list[str]]], int],
    argv: Optional[list[str]],
    expected: Sequence[type[BaseException]],
) -> int:
    """Run a command's `main`; an expected error prints one line on stderr and returns 1."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        return 130
    except tuple(expected) as exc:
        print(f"{prog}: error: {error_line(exc)}", file=sys.stderr)
        return 1


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` and listening (with SO_REUSEADDR, as uvicorn binds: a port left in
    TIME_WAIT by a stopped server is free, one another server listens on is not); `CannotListen` naming the
    address otherwise."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CannotListen(f"{host}:{port} is in use: stop the server there, or choose another port") from exc
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def model_cache_root() -> Path:
    """Where the built-in models are saved (`AJET_MODEL_CACHE`, else `~/.cache/agentjet/models`): the trainer
    creates them there, the explorer reads their tokenizers there."""
    return Path(os.environ.get("AJET_MODEL_CACHE", Path.home() / ".cache" / "agentjet" / "models"))

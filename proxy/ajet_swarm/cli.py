"""`ajet-swarm start | overwatch | top | new-client`: proxy + trainer in one command, and the client tools.

`start` runs `ajet-proxy start` and `ajet-trainer start` as two child processes on one store; Ctrl-C
(or either dying) stops both. `overwatch` is the Textual monitor; `new-client` writes a swarm-client
scaffold. None of them imports torch: the trainer's packages load only in its own process.
"""

from __future__ import annotations

import argparse
import socket
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from ajet import __version__
from ajet.utils.runtime import offline_env, run_cli
from ajet_proxy.cli import DEFAULT_PORT, add_monitor_arguments, add_start_arguments, expected_errors, run_monitor
from ajet_store import redact_url


def child_commands(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The proxy's and the trainer's command lines for `ajet-swarm start` (no secret in them, not even the store
    URL, which may carry a password: see `child_env`)."""
    common = ["--log-level", args.log_level, "--db-mode", format(args.db_mode, "o")]
    proxy = [sys.executable, "-m", "ajet_proxy.cli", "start", "--host", args.host, "--port", str(args.swarm_port),
             "--upstream", args.upstream, "--commit-window-ms", str(args.commit_window_ms), *common]
    if args.max_body_bytes is not None:
        proxy += ["--max-body-bytes", str(args.max_body_bytes)]
    trainer = [sys.executable, "-m", "ajet_trainer.cli", "start", *common, "--device", args.device,
               "--threads", str(args.threads), "--backend", args.backend, "--engine", args.engine,
               "--nnodes", str(args.nnodes)]
    if args.experiment_dir:
        trainer += ["--experiment-dir", args.experiment_dir]
    if args.ray_address:
        trainer += ["--ray-address", args.ray_address]
    if args.vllm_python:
        trainer += ["--vllm-python", args.vllm_python]
    trainer += [f"--vllm-arg={a}" for a in args.vllm_arg]
    return proxy, trainer


def child_env(args: argparse.Namespace) -> dict[str, str]:
    """The children's environment: offline, the store URL (`AJET_DB`) and the swarm token, never on a command
    line, which `ps` shows to every user of the host."""
    env = offline_env()
    env.pop("AJET_SWARM_TOKEN", None)
    env["AJET_DB"] = args.db
    if args.swarm_token:
        env["AJET_SWARM_TOKEN"] = args.swarm_token
    return env


ALL_INTERFACES = ("0.0.0.0", "::")


def banner(host: str, port: int, token: bool, store: str) -> str:
    """What `start` prints first: where clients connect, from this machine and from others, and whether the
    control API is protected (the proxy itself warns once when it is not)."""
    if host in ALL_INTERFACES:
        where = (f"ajet-swarm: listening on all interfaces, port {port}: other machines use "
                 f"http://{socket.gethostname()}:{port} (this one: http://127.0.0.1:{port})")
    else:
        where = f"ajet-swarm: listening on http://{host}:{port} only"
    guard = "swarm token required on control calls" if token else "no swarm token (set AJET_SWARM_TOKEN to require one)"
    return f"{where}; {guard}; store {store}"


def run_swarm(args: argparse.Namespace) -> int:
    """Proxy and trainer as two child processes; Ctrl-C (or either dying) stops both cleanly."""
    proxy, trainer = child_commands(args)
    env = child_env(args)
    procs = [subprocess.Popen(proxy, env=env), subprocess.Popen(trainer, env=env)]
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    print(banner(args.host, args.swarm_port, bool(args.swarm_token), redact_url(args.db)), flush=True)
    while not stopping.is_set() and all(p.poll() is None for p in procs):
        stopping.wait(0.5)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    return max(max(p.returncode or 0, 0) for p in procs)


def build_parser() -> argparse.ArgumentParser:
    """The `ajet-swarm` command line."""
    parser = argparse.ArgumentParser(prog="ajet-swarm", description="AgentJet Swarm: proxy + trainer")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run ajet-proxy and ajet-trainer together")
    add_start_arguments(start)
    start.set_defaults(port=None, host="0.0.0.0")  # agents run on other machines: all interfaces, as vLLM does
    start.add_argument("--swarm-port", type=int, default=DEFAULT_PORT)
    start.add_argument("--experiment-dir", default=None)
    start.add_argument("--device", default="auto")
    start.add_argument("--backend", choices=["auto", "embedded", "verl"], default="auto",
                       help="auto (default): verl + vLLM where CUDA, verl and vLLM are present, else embedded")
    start.add_argument("--ray-address", default=None,
                       help="verl backend: Ray cluster to join (default $RAY_ADDRESS, else a local Ray)")
    start.add_argument("--nnodes", type=int, default=1, help="verl backend: nodes of the Ray cluster to train on")
    start.add_argument("--engine", choices=["embedded", "vllm"], default="embedded",
                       help="vllm: the trainer launches vLLM's server and pushes each step's weights into it")
    start.add_argument("--vllm-python", default=None, help="--engine vllm: the Python with vLLM installed")
    start.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                       help="--engine vllm: one more vLLM argument, repeatable: --vllm-arg=--dtype=bfloat16")
    start.add_argument("--threads", type=int, default=1)
    for name in ("overwatch", "top"):
        add_monitor_arguments(sub.add_parser(name, help="the Textual monitor of a running swarm"))
    scaffold = sub.add_parser("new-client", help="scaffold tutorial/opencode_build_NAME/ (see the SKILL.md)")
    scaffold.add_argument("name")
    scaffold.add_argument("--root", default=".")
    return parser


def _main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("overwatch", "top"):
        run_monitor(args)
        return 0
    if args.command == "new-client":
        from ajet.scaffold import main as scaffold_main

        return scaffold_main([args.name, "--root", args.root])
    return run_swarm(args)


def main(argv: Optional[list[str]] = None) -> int:
    """`ajet-swarm`; an expected error prints one line and exits 1."""
    return run_cli("ajet-swarm", _main, argv, expected_errors())


if __name__ == "__main__":
    sys.exit(main())

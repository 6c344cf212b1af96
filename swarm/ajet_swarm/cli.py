"""`ajet-swarm start | overwatch | top | experiments | stop | new-client`: proxy + trainer in one command, and the
client tools.

`start` runs `ajet-proxy start` and `ajet-trainer start` as two child processes on one store; Ctrl-C
(or either dying) stops both. `overwatch` is the Textual monitor; `new-client` writes a swarm-client
scaffold; `experiments` lists a running swarm's experiments, `stop` stops them all (each to OFFLINE). None of
them imports torch: the trainer's packages load only in its own process.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from ajet import __version__
from ajet_core.flags import (
    add_config_option,
    add_log_level_option,
    apply_defaults,
    parse_with_config,
    to_argv,
)
from ajet_core.runtime import listening_socket, offline_env, run_cli
from ajet_proxy.access import access_lines, resolve_access
from ajet_proxy.addresses import ALL_INTERFACES, first_client_url, where_line
from ajet_proxy.cli import (
    add_monitor_arguments,
    add_proxy_options,
    add_start_arguments,
    add_swarm_client_arguments,
    expected_errors,
    run_monitor,
)
from ajet_store import redact_url
from ajet_store.connect import add_store_options
from ajet_trainer.cli import add_trainer_arguments, add_trainer_options


def child_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`ajet-proxy start`'s and `ajet-trainer start`'s own parsers: what each child will parse."""
    proxy, trainer = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_start_arguments(proxy)
    add_trainer_arguments(trainer)
    return proxy, trainer


SECRET_DESTS = ("db", "swarm_token")
"""Handed to the children by environment (`child_env`), never on a command line: `ps` shows command lines to
every user of the host, and a store URL may carry a password."""


def child_commands(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The proxy's and the trainer's command lines for `ajet-swarm start`: every option of each, as parsed here
    (`ajet_core.flags.to_argv`), but the secrets."""
    proxy_parser, trainer_parser = child_parsers()
    proxy = [sys.executable, "-m", "ajet_proxy.cli", "start", *to_argv(proxy_parser, args, SECRET_DESTS)]
    trainer = [sys.executable, "-m", "ajet_trainer.cli", "start", *to_argv(trainer_parser, args, SECRET_DESTS)]
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


def banner(host: str, port: int, token: bool, store: str) -> str:
    """What `start` prints first: where clients connect, from this machine and from others, and whether the
    control API is protected (the proxy itself warns once when it is not)."""
    if host in ALL_INTERFACES:
        where = (
            f"ajet-swarm: listening on all interfaces, port {port}: {where_line(host, port)} "
            f"(this one: http://127.0.0.1:{port})"
        )
    else:
        where = f"ajet-swarm: listening on http://{host}:{port} only"
    guard = "swarm token required on control calls" if token else "no swarm token (set AJET_SWARM_TOKEN to require one)"
    return f"{where}; {guard}; store {store}"


def died_line(name: str, code: int) -> str:
    """The line that says a child stopped on its own, and how (`code`: its return code, -N for signal N)."""
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    return f"ajet-swarm: the {name} {how}; stopping the swarm"


def exit_status(died: list[tuple[str, int]], codes: list[int]) -> int:
    """The swarm's exit status. A child that stopped on its own (`died`: name, return code) makes it non-zero:
    128 + N for a signal N, as a shell reports it, else the child's status, at least 1 (a child has no reason to
    stop by itself). Stopped by the user, the children's own statuses count (`codes`; their SIGTERM is ours)."""
    if died:
        return max(max(128 - c if c < 0 else c for _, c in died), 1)
    return max((c for c in codes if c > 0), default=0)


def run_swarm(args: argparse.Namespace) -> int:
    """Proxy and trainer as two child processes; Ctrl-C (or either dying) stops both cleanly, and a child that
    died makes the exit status non-zero with one line naming it. A port another process holds is one line and
    exit 1 before the banner and before either child starts (the proxy binds it a moment later)."""
    listening_socket(args.host, args.port).close()
    access = resolve_access(args.host, args.swarm_token, args.open, args.swarm_token_file)
    args.swarm_token = access.token
    proxy, trainer = child_commands(args)
    env = child_env(args)
    procs = [subprocess.Popen(proxy, env=env), subprocess.Popen(trainer, env=env)]
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    print(banner(args.host, args.port, bool(args.swarm_token), redact_url(args.db)), flush=True)
    for line in access_lines(access, first_client_url(args.host, args.port)):
        print(line, flush=True)
    while not stopping.is_set() and all(p.poll() is None for p in procs):
        stopping.wait(0.5)
    died = (
        []
        if stopping.is_set()
        else [(n, p.returncode) for n, p in zip(("proxy", "trainer"), procs) if p.poll() is not None]
    )
    for name, code in died:
        print(died_line(name, code), file=sys.stderr, flush=True)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return exit_status(died, [p.returncode for p in procs])


def add_swarm_start_arguments(p: argparse.ArgumentParser) -> None:
    """`ajet-swarm start`: every proxy and trainer option, each declared once by its own package, with the
    defaults of configs/proxy.yaml and configs/trainer.yaml, then configs/swarm.yaml's (all interfaces)."""
    add_store_options(p)
    add_proxy_options(p, port_flags=("--swarm-port", "--port"), worker_flags=("--proxies", "--workers"))
    add_trainer_options(p)
    add_log_level_option(p)
    add_config_option(p, "proxy.yaml, trainer.yaml and swarm.yaml")
    for name in ("proxy.yaml", "trainer.yaml", "swarm.yaml"):
        apply_defaults(p, name)


def build_parser() -> argparse.ArgumentParser:
    """The `ajet-swarm` command line."""
    parser = argparse.ArgumentParser(prog="ajet-swarm", description="AgentJet Swarm: proxy + trainer")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run ajet-proxy and ajet-trainer together")
    add_swarm_start_arguments(start)
    for name in ("overwatch", "top"):
        add_monitor_arguments(sub.add_parser(name, help="the Textual monitor of a running swarm"))
    for name, about in (("experiments", "list"), ("stop", "stop every one of")):
        add_swarm_client_arguments(sub.add_parser(name, help=f"{about} the experiments of a running swarm"))
    scaffold = sub.add_parser("new-client", help="scaffold tutorial/opencode_build_NAME/ (see the SKILL.md)")
    scaffold.add_argument("name")
    scaffold.add_argument("--root", default=".")
    return parser


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """`ajet-swarm`'s arguments, `start --config FILE` applied."""
    return parse_with_config(build_parser(), argv)


def _main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.command in ("overwatch", "top"):
        run_monitor(args)
        return 0
    if args.command in ("experiments", "stop"):
        return show_experiments(args.swarm_url, args.swarm_token, stop=args.command == "stop")
    if args.command == "new-client":
        from ajet.scaffold import main as scaffold_main

        return scaffold_main([args.name, "--root", args.root])
    return run_swarm(args)


def show_experiments(url: str, token: Optional[str], stop: bool) -> int:
    """Print one line per experiment of the swarm at `url` (its name, state, step), after stopping them all when
    `stop`."""
    from ajet import SwarmClient

    with SwarmClient(url, swarm_token=token, verbose=False) as client:
        experiments = client.stop_swarm() if stop else client.list_experiments()
    for e in experiments:
        name = (e.name or "(no job synced)") + (" [default]" if e.default else "")
        print(f"{name}: {e.status.state.value}, step {e.status.global_step}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """`ajet-swarm`; an expected error prints one line and exits 1."""
    return run_cli("ajet-swarm", _main, argv, expected_errors())


if __name__ == "__main__":
    sys.exit(main())

"""`ajet-proxy`: serve the proxy, watch it, inspect and export the store.

Heavy modules (FastAPI, LiteLLM, SQLAlchemy, Textual) are imported by the sub-command that needs them,
so `--help` and `--version` answer at once. Expected errors print one line (`ajet_core.runtime`).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Optional

from ajet import __version__
from ajet.errors import AjetError, ConfigError
from ajet.utils.flags import add_swarm_url_option
from ajet_core.flags import add_config_option, add_log_level_option, apply_defaults, parse_with_config
from ajet_core.options import add_options, options_from_args
from ajet_core.runtime import apply_offline_env, listening_socket, run_cli
from ajet_proxy import store_commands
from ajet_proxy.access import access_lines, resolve_access
from ajet_proxy.addresses import first_client_url
from ajet_proxy.config import ProxyConfig
from ajet_proxy.rescore import add_rescore_arguments
from ajet_store.connect import STORE_KEYS, StoreOptions, add_store_options


def add_proxy_options(
    p: argparse.ArgumentParser,
    port_flags: tuple[str, ...] = ("--port",),
    worker_flags: tuple[str, ...] = ("--workers",),
) -> None:
    """The proxy's own options, generated from `ProxyConfig` (`ajet-swarm start` declares them through this too,
    naming the port and the workers its own way); defaults: configs/proxy.yaml."""
    add_options(p, ProxyConfig, skip=STORE_KEYS, flags={"port": port_flags, "workers": worker_flags})


def add_start_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `ajet-proxy start`, with their defaults (configs/proxy.yaml, then AJET_DB / AJET_SWARM_TOKEN)."""
    add_store_options(p)
    add_proxy_options(p)
    add_log_level_option(p)
    add_config_option(p, "proxy.yaml")
    apply_defaults(p, "proxy.yaml")


def run_proxy(args: argparse.Namespace) -> int:
    """Serve the proxy with uvicorn until interrupted (`--workers N`: N processes on one socket). The port is bound
    first: one that cannot be had is one line and exit 1, before anything else starts or says it listens."""
    if args.workers > 1 and args.db.startswith("sqlite"):
        raise ConfigError(
            f"--workers {args.workers} needs a PostgreSQL store (postgresql://...): on SQLite the workers queue on "
            "the one file's write lock, for no more episodes per second and a p99 three times worse "
            "(bench/proxy_scaling.py); one proxy serves ~800 episodes/s on SQLite"
        )
    sock = listening_socket(args.host, args.port)
    apply_offline_env()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    access = resolve_access(args.host, args.swarm_token, args.open, args.swarm_token_file)
    args.swarm_token = access.token
    for line in access_lines(access, first_client_url(args.host, args.port)):
        print(line.replace("ajet-swarm:", "ajet-proxy:"), flush=True)
    if access.open_beyond_loopback:
        logging.getLogger("ajet_proxy").warning(
            "binding to %s with --open and no swarm token: anyone who can reach this port can control the engine",
            args.host,
        )
    if args.workers <= 1:
        _serve(args, sock)
        return 0
    from ajet_proxy.workers import serve_workers

    logging.getLogger("ajet_proxy").info("%d proxy workers on %s:%d, one store", args.workers, args.host, args.port)
    return serve_workers(args.workers, sock, lambda s: _serve(args, s))


def _serve(args: argparse.Namespace, sock: socket.socket) -> None:
    """One proxy process serving on `sock` (its app built here, after any fork)."""
    import uvicorn

    from ajet_proxy.app import create_app

    app = create_app(options_from_args(ProxyConfig, args))
    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        loop=loop,
        http=http,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=10,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    uvicorn.Server(config).run(sockets=[sock])


KEEP_ALIVE_S = 65
"""How long the proxy keeps an idle connection open: longer than its clients keep one (httpx and the OpenAI SDK: 5 s;
the AgentJet SDK: 4 s), so a client never sends on a connection the proxy is closing. At uvicorn's default of 5 s, a
client that reused one after 5 s of idle (a loaded 2-core box starving its loop) read a reset: `httpx.ReadError` on a
`begin_episode` in tests/proxy/test_hostile_clients.py."""


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def add_swarm_client_arguments(p: argparse.ArgumentParser) -> None:
    """How a tool reaches a running swarm's control API: `--swarm-url` and `--swarm-token`."""
    add_swarm_url_option(p)
    p.add_argument("--swarm-token", default=os.environ.get("AJET_SWARM_TOKEN"))


def add_monitor_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of the monitor (`ajet-proxy monitor`, `ajet-swarm overwatch`)."""
    add_swarm_client_arguments(p)
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between polls")


def run_monitor(args: argparse.Namespace) -> None:
    """The Textual monitor."""
    from ajet_proxy.overwatch import run

    run(args.swarm_url, args.refresh, args.swarm_token)


def _store_options(
    reading: tuple[argparse.ArgumentParser, ...], per_experiment: tuple[argparse.ArgumentParser, ...]
) -> None:
    """`--db` (and its defaults) on the commands that read a store; `--experiment` on those that read one
    experiment's."""
    for p in reading:
        add_options(p, StoreOptions, skip=("db_mode", "trainer_timeout_s"))
        apply_defaults(p, "proxy.yaml")
    for p in per_experiment:
        p.add_argument("--experiment", help="project/experiment: one of the swarm's experiments (default: its first)")


def _main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-proxy", description="AgentJet Swarm proxy")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_start_arguments(sub.add_parser("start", help="serve the control API and the data plane"))
    add_monitor_arguments(sub.add_parser("monitor", help="the Textual monitor (same as ajet-swarm overwatch)"))
    eps = sub.add_parser("episodes", help="inspect episodes in the store").add_subparsers(dest="sub", required=True)
    lst = eps.add_parser("list", help="one line per episode")
    lst.add_argument("--status", choices=["open", "ended", "aborted", "expired"])
    show = eps.add_parser("show", help="every call of one episode")
    show.add_argument("uuid")
    exp = sub.add_parser("export", help="write rewarded episodes with messages, token ids and rewards")
    exp.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    exp.add_argument("--since", type=int, default=None, help="only episodes trained at this step or later (or not yet)")
    exp.add_argument("--out", default=None)
    exp.add_argument("--images", default=None, help="write each call's image files into this folder (<sha256>.png ...)")
    db = sub.add_parser("db", help="the store's schema").add_subparsers(dest="sub", required=True)
    upg = db.add_parser("upgrade", help="migrate an older store to this version's schema (episodes are kept)")
    plt = sub.add_parser("plot", help="draw reward, entropy, log-prob gap and episodes per step into a PNG")
    plt.add_argument("--out", default="reward.png")
    prn = sub.add_parser(
        "prune",
        help="drop request/response bodies of calls trained more than N steps ago "
        "(token ids, rewards and metrics stay)",
    )
    prn.add_argument("--keep-steps", type=int, required=True, help="keep the bodies of the last N steps' episodes")
    prn.add_argument("--vacuum", action="store_true", help="then give the freed space back (rewrites the file)")
    rsc = sub.add_parser("rescore", help="score stored episodes again with a reward function (a new reward version)")
    add_rescore_arguments(rsc)
    dst = sub.add_parser("dataset", help="best-of-group SFT or DPO data from the store, in TRL's formats")
    store_commands.add_dataset_arguments(dst)
    xpl = sub.add_parser("explore", help="a web explorer of runs, episodes and trained tokens over the store")
    _explore_module().add_explore_arguments(xpl)
    _store_options((lst, show, exp, upg, plt, prn, xpl, rsc, dst), (lst, show, exp, plt, rsc, dst))
    args = parse_with_config(parser, argv)
    if args.command == "start":
        return run_proxy(args)
    elif args.command == "monitor":
        run_monitor(args)
    elif args.command == "explore":
        return _explore_module().run_explore(args)
    elif args.command == "episodes":
        (store_commands.episodes_list if args.sub == "list" else store_commands.episodes_show)(args)
    else:
        store_commands.BY_NAME[args.command](args)
    return 0


def _explore_module():  # noqa: ANN202 - imported when used: its templates and Starlette app
    from ajet_proxy.explore import serve

    return serve


def expected_errors() -> tuple[type[BaseException], ...]:
    """What a user can cause (a bad store URL, an unknown episode, a store of another schema): one line (every
    error of the tree is an `AjetError`)."""
    return (AjetError, FileNotFoundError)


def main(argv: Optional[list[str]] = None) -> int:
    """`ajet-proxy`; an expected error prints one line and exits 1."""
    return run_cli("ajet-proxy", _main, argv, expected_errors())


if __name__ == "__main__":
    sys.exit(main())

"""`ajet-proxy`: start the proxy (more sub-commands come with the monitor)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import Optional

DEFAULT_PORT = 10086
DEFAULT_DB = "sqlite:///./ajet-swarm.db"


def _offline_env() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_start_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `ajet-proxy start` (shared with `ajet-swarm start`)."""
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--db", default=os.environ.get("AJET_DB", DEFAULT_DB), help="SQLAlchemy URL of the store")
    p.add_argument("--swarm-token", default=os.environ.get("AJET_SWARM_TOKEN"),
                   help="require this token on control calls")
    p.add_argument("--upstream", choices=["aiohttp", "litellm"], default="aiohttp",
                   help="send agent calls through a pooled aiohttp session (default) or litellm.Router")
    p.add_argument("--log-level", default="info")


def run_proxy(args: argparse.Namespace) -> None:
    """Serve the proxy with uvicorn until interrupted."""
    _offline_env()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from ajet_proxy.app import create_app
    from ajet_proxy.state import ProxyConfig

    if not _is_loopback(args.host) and not args.swarm_token:
        logging.getLogger("ajet_proxy").warning(
            "binding to %s without --swarm-token: anyone who can reach this port can control the engine", args.host)
    app = create_app(ProxyConfig(db_url=args.db, swarm_token=args.swarm_token, upstream=args.upstream))
    loop = "uvloop" if _has("uvloop") else "asyncio"
    http = "httptools" if _has("httptools") else "h11"
    uvicorn.run(app, host=args.host, port=args.port, loop=loop, http=http, log_level=args.log_level,
                access_log=False, timeout_graceful_shutdown=10)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-proxy", description="AgentJet Swarm proxy")
    sub = parser.add_subparsers(dest="command", required=True)
    add_start_arguments(sub.add_parser("start", help="serve the control API and the data plane"))
    args = parser.parse_args(argv)
    if args.command == "start":
        run_proxy(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

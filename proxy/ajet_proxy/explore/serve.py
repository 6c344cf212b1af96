"""`ajet-proxy explore --db URL`: the explorer alone over a store, on its own port (read-only: it writes nothing
to the store; a running swarm's proxy serves the same pages at `/explore`)."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Optional

from starlette.applications import Starlette
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route

from ajet.errors import ExperimentNotFound
from ajet_core.runtime import apply_offline_env, listening_socket
from ajet_proxy.access import LoopbackExplorerMiddleware
from ajet_proxy.auth import SwarmTokenMiddleware
from ajet_proxy.explore.app import explore_app, login_page
from ajet_store import Catalog, Store


class ListedExperiments:
    """The experiments of a first store's swarm (`Experiments` of the explorer command), each store opened on first
    use."""

    def __init__(self, first: Store):
        self.catalog = Catalog(first)
        self._opened: dict[str, Store] = {}
        self._lock = threading.Lock()  # pages are served from a thread pool

    def store(self, slug: str) -> Store:
        with self._lock:
            if slug not in self._opened:
                if slug not in {e.slug for e in self.catalog.entries()}:
                    raise ExperimentNotFound(f"this store lists no experiment {slug!r}")
                self._opened[slug] = self.catalog.open(slug)
            return self._opened[slug]

    def listed(self) -> list[tuple[str, str]]:
        return [(e.name, e.slug) for e in self.catalog.entries()]


def standalone_app(store: Store, tokenizer: Optional[str] = None, token: Optional[str] = None) -> Starlette:
    """The explorer of `store` and the experiments it lists, mounted at `/explore` (`/` redirects there), behind
    `token` when one is given."""
    app = Starlette(
        routes=[
            Route("/", lambda request: RedirectResponse("/explore/", status_code=307)),
            Mount("/explore", app=explore_app(ListedExperiments(store), tokenizer, token)),
        ]
    )
    if token:
        app.add_middleware(SwarmTokenMiddleware, token=token, login=lambda: login_page(401))
    else:  # no token: the pages go to this machine only
        app.add_middleware(LoopbackExplorerMiddleware)
    return app


def add_explore_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="where to listen (the pages show model text and rewards)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--tokenizer", default=None, help="a model folder with tokenizer.json, for the tokens' text")
    p.add_argument("--swarm-token", default=None, help="required of every page (a login form sets it)")


def run_explore(args: argparse.Namespace) -> int:
    """Serve the explorer until interrupted; the port is bound first (a busy one: one line, exit 1)."""
    import uvicorn

    sock = listening_socket(args.host, args.port)
    apply_offline_env()
    store = Store(args.db)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("ajet_proxy").info("explorer of %s on http://%s:%d/explore/", args.db, args.host, args.port)
    app = standalone_app(store, args.tokenizer, args.swarm_token)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0

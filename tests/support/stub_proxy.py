"""A proxy of its own in front of a stub engine, ROLLING, for a test that changes what the swarm has (it removes
the engines, starts the stub with other flags): everything closed on exit."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ajet import SwarmClient
from ajet_store import Store, sqlite_url
from tests.support.procs import Proc, start_proxy, start_stub
from tests.support.rolling import ensure_rolling


@dataclass
class StubProxy:
    """The stub, the proxy, its store and a client of it."""

    stub: Proc
    proxy: Proc
    store: Store
    client: SwarmClient


@contextlib.contextmanager
def proxy_on_stub(tmp: Path, name: str, *stub_args: str) -> Iterator[StubProxy]:
    """A stub (`stub_args`: its flags) and a proxy on a fresh store `<name>.db`, ROLLING on the stub."""
    stub = start_stub(tmp, *stub_args)
    url = sqlite_url(tmp / f"{name}.db")
    proxy, store = start_proxy(tmp, url), Store(url)
    try:
        client = SwarmClient(proxy.url)
        ensure_rolling(client, store, stub.url)
        yield StubProxy(stub, proxy, store, client)
    finally:
        proxy.close()
        stub.close()
        store.close()

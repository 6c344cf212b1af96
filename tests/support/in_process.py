"""A proxy served in this process (its ASGI app behind starlette's test transport, lifespan and all) for the
in-process lane: the SDK's `SwarmClient` talks to it without a socket or a child process."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from starlette.testclient import TestClient

from ajet import SwarmClient
from ajet_proxy.app import create_app
from ajet_proxy.config import ProxyConfig
from ajet_store import Store, sqlite_url

URL = "http://127.0.0.1"


@contextmanager
def proxy_in_process(tmp: Path) -> Iterator[tuple[SwarmClient, Store]]:
    """A `SwarmClient` of a proxy app running in this process on a fresh store, and that store."""
    url = sqlite_url(tmp / "in-process.db")
    with TestClient(create_app(ProxyConfig.from_config(db_url=url)), base_url=URL) as http:  # runs the app's lifespan
        client = SwarmClient(URL, http_client=http, verbose=False, max_retries=0)
        store = Store(url)
        try:
            yield client, store
        finally:
            client.close()
            store.close()

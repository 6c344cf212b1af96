"""One HTTP connection pool for the OpenAI clients of every episode (`OpenaiBaseUrlAndApiKey.as_openai_client`).

An agent makes a client per episode, since each episode has a key of its own. A new `openai.OpenAI` builds a new
httpx client, and with it a TLS context that loads the CA bundle, whether or not the URL is https. An agent process
that played episodes on two threads grew by tens of KiB an episode that way, in native memory its allocator never
gave back (`bench/soak.py`'s client series). The episodes' clients therefore share one pool: one for the
process, and one per event loop for async clients (an httpx async client belongs to the loop that opened its
connections). The pool lives as long as its process or loop: closing an episode's client, or leaving its `with`
block, leaves the pool open for the next episode. A client given `http_client=` keeps its own.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # openai is the client extra's, imported when a pool is first made
    from openai import DefaultAsyncHttpxClient, DefaultHttpxClient

_lock = threading.Lock()
_pools: dict[int, DefaultHttpxClient] = {}
"""The sync pool by process id: a process forked from one that had a pool makes its own (the parent's connections
are not the child's to use)."""
_loop_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DefaultAsyncHttpxClient] = weakref.WeakKeyDictionary()
"""Each event loop's async pool, dropped with its loop."""


@functools.lru_cache(maxsize=1)
def _pool_classes() -> tuple[type[DefaultHttpxClient], type[DefaultAsyncHttpxClient]]:
    """openai's default httpx clients (its timeouts, connection limits, redirects), that an episode's client cannot
    close: the pool is the process's (or the loop's)."""
    import openai

    class SharedPool(openai.DefaultHttpxClient):
        def close(self) -> None:
            """Kept open: other episodes' clients use it."""

    class SharedAsyncPool(openai.DefaultAsyncHttpxClient):
        async def aclose(self) -> None:
            """Kept open: other episodes' clients on this loop use it."""

    return SharedPool, SharedAsyncPool


def sync_pool() -> DefaultHttpxClient:
    """The process's pool for sync clients, made on first use."""
    pid = os.getpid()
    with _lock:
        if pid not in _pools:
            _pools.clear()
            _pools[pid] = _pool_classes()[0]()
        return _pools[pid]


def async_pool() -> Optional[DefaultAsyncHttpxClient]:
    """The running loop's pool for async clients, made on first use; None outside a running loop (the client then
    gets a pool of its own, as openai makes it)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    with _lock:
        if loop not in _loop_pools:
            _loop_pools[loop] = _pool_classes()[1]()
        return _loop_pools[loop]

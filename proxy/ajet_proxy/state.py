"""The proxy's process state and its background loops.

`ProxyState` owns the store, the call-log writer, the episode registry, the policy router and the
upstream HTTP session. Its loops (on the event loop, with store reads in a thread):
- every `poll_s`: read the engine row (the trainer moves the state) and reload the router when the
  deployments version changes;
- every second: expire idle episodes, and forget episodes the store no longer has open.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Literal, Optional, TypeVar

import aiohttp

from ajet.types import EpisodeStatus
from ajet_proxy.call_log import CallLogWriter
from ajet_proxy.errors import UpstreamUnavailable
from ajet_proxy.group_commit import GroupCommitter
from ajet_proxy.lifecycle import EpisodeCommitter
from ajet_proxy.limits import InputLimits
from ajet_proxy.open_episodes import EpisodeRegistry
from ajet_proxy.routing import PolicyRouter
from ajet_store import Store
from ajet_store.connect import DEFAULT_FILE_MODE
from ajet_store.types import EngineRow

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class ProxyConfig:
    """Settings of one proxy process."""

    db_url: str
    """SQLAlchemy URL of the store."""
    swarm_token: Optional[str] = None
    """Required on control calls when set."""
    db_mode: int = DEFAULT_FILE_MODE
    """Permissions of the SQLite store file when this process creates it."""
    upstream: Literal["aiohttp", "litellm"] = "aiohttp"
    """How calls reach the policy backend."""
    poll_s: float = 0.2
    """How often the engine row is re-read."""
    upstream_timeout_s: float = 600.0
    """Total time allowed for one upstream call."""
    max_connections: int = 1024
    """Size of the upstream connection pool."""
    limits: InputLimits = InputLimits()
    """Bounds on request size and shape."""
    commit_window_s: float = 0.0
    """How long the call log gathers calls after the first before committing them together (0: commit
    whatever is waiting at once; a few ms trade latency for fewer transactions under load)."""
    shared: bool = False
    """Other proxies serve the same store (`--workers N`, `ajet-swarm start --proxies N`, or `--shared-store`):
    call numbers are reserved in the store, an episode begun elsewhere is taken up on its first call here, its
    token history and Responses conversations are read from the store when another proxy served its last call,
    and idleness is the store's. One proxy alone keeps all of that in memory (one write less per call)."""


class ProxyState:
    """Everything the routes share; created once per app."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.store = Store(config.db_url, file_mode=config.db_mode)
        self.writer = CallLogWriter(self.store, interval=config.commit_window_s)
        self.open_episodes = EpisodeRegistry()
        self.router = PolicyRouter(always_build=config.upstream == "litellm")
        self.engine_row: EngineRow = self.store.engine_row()
        self.counters = {"requests": 0, "errors": 0}
        self._http: Optional[aiohttp.ClientSession] = None  # created in the event loop, by `lifespan`
        self._tasks: list[asyncio.Task[Any]] = []
        # One thread for the episode life cycle's store writes (begin, end, abort): queued there, they never
        # contend for SQLite's write lock with each other (whose busy wait sleeps up to 100 ms a try) nor for
        # the GIL as dozens of pool threads would; the event loop never blocks on them.
        self.lifecycle = EpisodeCommitter(self.store)
        """Begins and ends, group-committed on the episode thread."""
        self.numbers: GroupCommitter[str, int] = GroupCommitter(self.store.reserve_calls, "ajet-call-numbers")
        """Shared store: call numbers reserved in the episodes' rows, group-committed on a thread of their own."""

    # ------------------------------------------------------------------ life cycle
    @asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        """Start the writer, load open episodes and deployments, run the loops; flush on exit."""
        self.writer.start()
        self.lifecycle.start()
        if self.config.shared:
            self.numbers.start()
        open_rows = self.store.episodes(status=EpisodeStatus.OPEN)
        next_seqs = self.store.next_seqs([row.uuid for row in open_rows])
        for row in open_rows:  # numbering goes on after the highest stored call (shared: the store numbers)
            self.open_episodes.add_row(
                row, next_seq=row.calls_reserved if self.config.shared else next_seqs.get(row.uuid, 0)
            )
        self._load_router(self.store.engine_row())
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.config.max_connections, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=self.config.upstream_timeout_s),
            auto_decompress=False,
        )
        self._tasks = [asyncio.create_task(self._poll_engine()), asyncio.create_task(self._housekeeping())]
        gc.collect()
        gc.freeze()  # start-up objects (pydantic, litellm when loaded) stay out of every later GC pass
        logger.info("proxy ready: %d open episode(s), engine %s", len(self.open_episodes), self.engine_row.state.value)
        try:
            yield
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.http.close()
            self.lifecycle.stop()
            self.numbers.stop()
            self.writer.stop()
            self.store.close()
            logger.info("proxy stopped; %d calls written", self.writer.written)

    async def in_episode_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` (an episode life-cycle change: store writes) on the one episode thread."""
        return await self.lifecycle.run(fn, *args)

    @property
    def http(self) -> aiohttp.ClientSession:
        """The pooled upstream session (exists while the app runs)."""
        if self._http is None:
            raise UpstreamUnavailable("the proxy is not serving yet")
        return self._http

    def _load_router(self, row: EngineRow) -> None:
        if row.deployments_version != self.router.version:
            self.router.load(self.store.deployments(), row.deployments_version)

    def refresh_engine(self) -> EngineRow:
        """Re-read the engine row now (control routes call this after changing it).

        The router is reloaded before the new row is published, so a call never sees ROLLING
        without the deployments that came with it.
        """
        row = self.store.engine_row()
        self._load_router(row)
        self.engine_row = row
        return row

    # ------------------------------------------------------------------ loops
    async def _poll_engine(self) -> None:
        while True:
            try:
                row = await asyncio.to_thread(self.store.engine_row)
                if row.deployments_version != self.router.version:
                    deps = await asyncio.to_thread(self.store.deployments)
                    await asyncio.to_thread(self.router.load, deps, row.deployments_version)  # may import LiteLLM
                self.engine_row = row
            except Exception:  # noqa: BLE001 - a transient store error must not kill the loop
                logger.exception("engine poll failed")
            await asyncio.sleep(self.config.poll_s)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.expire_idle()
                read_at = time.time()
                open_uuids = await asyncio.to_thread(self.store.open_uuids)
                self.open_episodes.reconcile(open_uuids, read_at)
            except Exception:  # noqa: BLE001
                logger.exception("housekeeping failed")

    async def expire_idle(self) -> list[str]:
        """Expire episodes idle longer than their timeout; their keys stop working."""
        idle = self.open_episodes.idle_expired()
        if not idle:
            return []
        # shared: another proxy may be serving it; the store's activity (every proxy's calls) decides
        expired = await asyncio.to_thread(self.store.expire_episodes, idle, time.time() if self.config.shared else None)
        self.open_episodes.remove(idle)
        if expired:
            logger.info("expired %d idle episode(s)", len(expired))
        return expired

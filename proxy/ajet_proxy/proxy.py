"""One proxy process: what its routes share, and its background loops.

`Proxy` owns the store, the call writer, the open episodes, the engine router and the HTTP client to the engines.
Its loops (on the event loop, with store reads in a thread):
- every `poll_s`: read the experiment's row (the trainer moves its state) and reload the router when the engines
  version changes;
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

from ajet.errors import EngineUnavailable, StoreUnavailable
from ajet.types import EpisodeStatus
from ajet.utils.flags import shipped_with_env
from ajet_proxy.call_writer import CallWriter
from ajet_proxy.group_commit import GroupCommitter
from ajet_proxy.lifecycle import EpisodeCommitter
from ajet_proxy.limits import InputLimits
from ajet_proxy.open_episodes import OpenEpisodes
from ajet_proxy.routing import EngineRouter
from ajet_store import Store
from ajet_store.types import ExperimentRow

logger = logging.getLogger(__name__)
T = TypeVar("T")

CONFIG_FILE = "proxy.yaml"
"""The file in `configs/` that holds the proxy's defaults."""


@dataclass(frozen=True)
class ProxyConfig:
    """Settings of one proxy process. `from_config` fills what `ajet-proxy start` takes from `configs/proxy.yaml`
    (the only source of those defaults); the rest are this class's own."""

    db_url: str
    """SQLAlchemy URL of the store (`db`)."""
    db_mode: int
    """Permissions of the SQLite store file when this process creates it."""
    swarm_token: Optional[str]
    """Required on control calls when set."""
    transport: Literal["aiohttp", "litellm"]
    """How calls reach the engines: a pooled aiohttp session, or `litellm.Router.acompletion`."""
    limits: InputLimits
    """Bounds on request size and shape."""
    commit_window_s: float
    """How long the call log gathers calls after the first before committing them together (0: commit
    whatever is waiting at once; a few ms trade latency for fewer transactions under load)."""
    gc_young_threshold: int
    """Allocations between two passes of Python's young-generation garbage collector in this process (its first
    threshold; Python's default is 700). A call allocates thousands of short-lived objects, so at 700 the
    collector runs several times per call and walks every object of the calls in flight each time."""
    shared: bool
    """Other proxies serve the same store (`--workers N`, `ajet-swarm start --proxies N`, or `--shared-store`):
    call numbers are reserved in the store, an episode begun elsewhere is taken up on its first call here, its
    history is read from the store when another proxy served its calls, and idleness is the store's. One proxy
    alone keeps all of that in memory (one write less per call)."""
    allow_absolute_experiment_dir: bool
    """A client's job may name an absolute `experiment_dir` on the training box (`--allow-absolute-experiment-dir`);
    else `sync_train_config` refuses it with a 422 naming `job.experiment_dir`, so a job's folders stay under the
    trainer's `experiments/` (names and relative paths cannot climb out: `AgentJetJob` refuses `/` and `..`)."""
    poll_s: float = 0.2
    """How often the experiment's row is re-read."""
    engine_timeout_s: float = 600.0
    """Total time allowed for one call to an engine."""
    max_connections: int = 1024
    """Size of the connection pool to the engines."""
    preflight_wait_s: float = 15.0
    """How long `sync_train_config` waits for a beating trainer's template preflight of the job's model before it
    answers without it (the status carries it once it comes)."""

    @classmethod
    def from_config(cls, **overrides: Any) -> "ProxyConfig":
        """The settings `ajet-proxy start` would run with (`configs/proxy.yaml`, then the environment), with
        `overrides` (field names) on top."""
        v = shipped_with_env(CONFIG_FILE)
        fields: dict[str, Any] = {
            "db_url": v["db"],
            "db_mode": int(str(v["db_mode"]), 8),
            "swarm_token": v["swarm_token"],
            "transport": v["transport"],
            "limits": InputLimits(max_body_bytes=int(str(v["max_body_bytes"]))),
            "commit_window_s": float(str(v["commit_window_ms"])) / 1000.0,
            "gc_young_threshold": int(str(v["gc_young_threshold"])),
            "shared": bool(v["shared_store"]) or int(str(v["workers"])) > 1,
            "allow_absolute_experiment_dir": bool(v["allow_absolute_experiment_dir"]),
        }
        return cls(**{**fields, **overrides})


class Proxy:
    """Everything the routes share; created once per app."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.store = Store(config.db_url, file_mode=config.db_mode)
        self.writer = CallWriter(self.store, interval=config.commit_window_s)
        self.open_episodes = OpenEpisodes()
        self.router = EngineRouter(always_build=config.transport == "litellm")
        self.experiment: ExperimentRow = self.store.experiment()
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
        """Start the writer, load open episodes and registered engines, run the loops; flush on exit."""
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
        self._load_router(self.store.experiment())
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.config.max_connections, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=self.config.engine_timeout_s),
            auto_decompress=False,
        )
        self._tasks = [asyncio.create_task(self._poll_experiment()), asyncio.create_task(self._housekeeping())]
        gc.collect()
        gc.freeze()  # start-up objects (pydantic, litellm when loaded) stay out of every later GC pass
        thresholds = gc.get_threshold()
        gc.set_threshold(self.config.gc_young_threshold, *thresholds[1:])
        logger.info("proxy ready: %d open episode(s), %s", len(self.open_episodes), self.experiment.state.value)
        try:
            yield
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            gc.set_threshold(*thresholds)
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
        """The pooled HTTP client to the engines (exists while the app runs)."""
        if self._http is None:
            raise EngineUnavailable("the proxy is not serving yet")
        return self._http

    def _load_router(self, row: ExperimentRow) -> None:
        if row.engines_version != self.router.version:
            self.router.load(self.store.engines(), row.engines_version)

    def refresh_experiment(self) -> ExperimentRow:
        """Re-read the experiment's row now (control routes call this after changing it).

        The router is reloaded before the new row is published, so a call never sees ROLLING
        without the engines that came with it.
        """
        row = self.store.experiment()
        self._load_router(row)
        self.experiment = row
        return row

    # ------------------------------------------------------------------ loops
    async def _poll_experiment(self) -> None:
        away: Optional[float] = None  # since when the store refuses reads (a database restart): said once
        while True:
            try:
                row = await asyncio.to_thread(self.store.experiment)
                if row.engines_version != self.router.version:
                    engines = await asyncio.to_thread(self.store.engines)
                    await asyncio.to_thread(self.router.load, engines, row.engines_version)  # may import LiteLLM
                self.experiment = row
                if away is not None:
                    logger.warning("the store is back after %.1fs", time.monotonic() - away)
                    away = None
            except StoreUnavailable as exc:  # calls and control routes answer 503 naming it meanwhile
                if away is None:
                    away = time.monotonic()
                    logger.warning("the store is away (%s): answering 503 until it is back", exc.detail)
            except Exception:  # noqa: BLE001 - a transient store error must not kill the loop
                logger.exception("reading the experiment failed")
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

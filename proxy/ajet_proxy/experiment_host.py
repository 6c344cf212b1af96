"""What one proxy keeps of one experiment: its store, call writer, open episodes, engine router and latest row, with
the threads that commit its episodes' life cycle and call numbers.

A proxy holds one `ExperimentHost` per experiment of the swarm (`Proxy.hosts`): the default experiment's, then each
one the catalog lists (`ajet_store.Catalog`). Each owns its experiment's state on this proxy, so one experiment's calls,
begins and ends never wait on another's store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, TypeVar

from ajet.types import EpisodeStatus
from ajet_proxy.call_gate import CallGate
from ajet_proxy.call_writer import CallWriter
from ajet_proxy.config import ProxyConfig
from ajet_proxy.group_commit import GroupCommitter
from ajet_proxy.lifecycle import EpisodeCommitter
from ajet_proxy.open_episodes import OpenEpisodes
from ajet_proxy.routing import EngineRouter
from ajet_store import Store
from ajet_store.types import ExperimentRow

logger = logging.getLogger(__name__)
T = TypeVar("T")


class ExperimentHost:
    """One experiment as one proxy serves it; created and closed by the proxy's life cycle."""

    def __init__(self, slug: str, store: Store, config: ProxyConfig):
        self.slug = slug
        """The experiment's slug (`default` for the default experiment, `ajet_store.placement`)."""
        self.config = config
        self.store = store
        self.writer = CallWriter(store, interval=config.commit_window_s)
        self.open_episodes = OpenEpisodes(slug)
        self.router = EngineRouter(always_build=config.transport == "litellm")
        self.experiment: ExperimentRow = store.experiment()
        self.calls = CallGate()
        """The experiment's calls at the engines, under its job's `max_calls_in_flight`."""
        # One thread for the episode life cycle's store writes (begin, end, abort): queued there, they never
        # contend for SQLite's write lock with each other (whose busy wait sleeps up to 100 ms a try) nor for
        # the GIL as dozens of pool threads would; the event loop never blocks on them.
        self.lifecycle = EpisodeCommitter(store)
        """Begins and ends, group-committed on the episode thread."""
        self.numbers: GroupCommitter[str, int] = GroupCommitter(store.reserve_calls, "ajet-call-numbers")
        """Shared store: call numbers reserved in the episodes' rows, group-committed on a thread of their own."""

    def start(self) -> None:
        """Start the writer and the threads, load the open episodes and the registered engines."""
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
        self.refresh_experiment()

    def stop(self) -> None:
        """Stop the threads, flushing what they hold, and close the store."""
        self.lifecycle.stop()
        self.numbers.stop()
        self.writer.stop()
        self.store.close()

    async def in_episode_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` (an episode life-cycle change: store writes) on the experiment's one episode thread."""
        return await self.lifecycle.run(fn, *args)

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

    async def poll(self) -> None:
        """Read the experiment's row (the trainer moves its state), reloading the router when its engines changed;
        `StoreUnavailable` when the store is away."""
        row = await asyncio.to_thread(self.store.experiment)
        if row.engines_version != self.router.version:
            engines = await asyncio.to_thread(self.store.engines)
            await asyncio.to_thread(self.router.load, engines, row.engines_version)  # may import LiteLLM
        self.experiment = row

    async def tidy(self) -> None:
        """Expire idle episodes, and forget the ones the store no longer has open."""
        await self.expire_idle()
        read_at = time.time()
        open_uuids = await asyncio.to_thread(self.store.open_uuids)
        self.open_episodes.reconcile(open_uuids, read_at)

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

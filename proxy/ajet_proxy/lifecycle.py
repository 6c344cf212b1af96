"""Group commit of the episode life cycle: begins and ends queued meanwhile share one store transaction.

Each `begin_episode` / `end_episode` handler awaits `EpisodeCommitter.apply(change)`; the change is durable
when it returns. Changes run on the proxy's one episode thread (never contending for SQLite's write lock with
each other); while one transaction runs, the changes that arrive queue up and go together in the next one, so
under load a transaction's fixed cost (BEGIN IMMEDIATE, the engine read, COMMIT, the thread hop) is shared by
dozens of episodes, and with a single client it costs what one transaction per change did.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Optional, Union

from ajet_store import EpisodeChange, EpisodeRow, Store

_Result = Union[EpisodeRow, BaseException]


class EpisodeCommitter:
    """Queues episode changes from the event loop and commits them in batches on `executor` (one thread)."""

    def __init__(self, store: Store, executor: Executor):
        self.store = store
        self.executor = executor
        self._queue: list[tuple[EpisodeChange, "asyncio.Future[EpisodeRow]"]] = []
        self._draining: Optional["asyncio.Task[None]"] = None
        self.transactions = 0
        """Transactions run so far (changes / transactions: how many changes shared one)."""
        self.changes = 0

    async def apply(self, change: EpisodeChange) -> EpisodeRow:
        """Commit `change` (with whatever else is queued); its episode row, or the `StoreError` that refused it."""
        loop = asyncio.get_running_loop()
        done: "asyncio.Future[EpisodeRow]" = loop.create_future()
        self._queue.append((change, done))
        if self._draining is None or self._draining.done():
            self._draining = loop.create_task(self._drain())
        return await done

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            batch, self._queue = self._queue, []
            changes = [change for change, _ in batch]
            try:
                results: list[_Result] = list(
                    await loop.run_in_executor(self.executor, self.store.apply_changes, changes)
                )
            except Exception as exc:  # noqa: BLE001 - the transaction rolled back: every waiter hears why
                results = [exc] * len(batch)
            self.transactions += 1
            self.changes += len(batch)
            for (_, done), result in zip(batch, results):
                if done.done():  # its handler was cancelled (client gone); the change itself stands
                    continue
                if isinstance(result, BaseException):
                    done.set_exception(result)
                else:
                    done.set_result(result)

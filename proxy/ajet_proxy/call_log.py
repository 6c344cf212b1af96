"""The call log: a background thread that group-commits LLM calls into the store.

A handler awaits `commit(record)` before its answer leaves: the record is durable when the agent
sees the answer, so every answered call is in the store, even after a SIGKILL of the proxy. The thread
takes everything queued at that moment into one transaction (group commit): while one commit runs,
the calls answered meanwhile queue up and share the next, so a call waits a few milliseconds and the
commit cost is shared by its neighbours. `submit` (no wait) is for records of calls that were never
answered (a disconnect, no reachable backend). `flush()` is a barrier: it returns once every call
queued before it is committed. `pending(uuid)` says whether an episode has calls queued and not yet
committed: `end_episode` flushes only then (usually its calls were committed before their answers left).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Optional, Union

from ajet_store import Store, StoreUnavailable
from ajet_store.types import CallRecord

logger = logging.getLogger(__name__)

MAX_BATCH = 2048
WRITE_ATTEMPTS = 3


@dataclass
class _Durable:
    """A record whose handler waits: `done` is resolved on its loop once the record is committed."""

    record: CallRecord
    loop: asyncio.AbstractEventLoop
    done: "asyncio.Future[None]"


_Item = Union[CallRecord, _Durable, threading.Event, None]


class CallLogWriter:
    """Owns one thread; `submit` is safe from any thread or the event loop."""

    def __init__(self, store: Store, interval: float = 0.0):
        self.store = store
        self.interval = interval
        """Extra seconds to gather a batch after its first record (0: take what is queued, commit at once)."""
        self._q: "queue.SimpleQueue[_Item]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ajet-call-log", daemon=True)
        self._pending: dict[str, int] = {}
        """Episode uuid -> its records queued and not yet written (or given up on)."""
        self._pending_lock = threading.Lock()
        self.written = 0
        self.failed_batches = 0

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def submit(self, record: CallRecord) -> None:
        """Queue a call for writing without waiting (for calls that were never answered)."""
        self._track([record], +1)
        self._q.put(record)

    async def commit(self, record: CallRecord) -> None:
        """Return once `record` is committed; `StoreUnavailable` when it could not be written."""
        loop = asyncio.get_running_loop()
        item = _Durable(record, loop, loop.create_future())
        self._track([record], +1)
        self._q.put(item)
        await item.done

    def pending(self, episode_uuid: str) -> bool:
        """Whether calls of the episode are queued and not yet written."""
        with self._pending_lock:
            return episode_uuid in self._pending

    def _track(self, records: list[CallRecord], delta: int) -> None:
        with self._pending_lock:
            for r in records:
                n = self._pending.get(r.episode_uuid, 0) + delta
                if n > 0:
                    self._pending[r.episode_uuid] = n
                else:
                    self._pending.pop(r.episode_uuid, None)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every call queued so far is committed; False on timeout."""
        if not self._thread.is_alive():
            return True
        done = threading.Event()
        self._q.put(done)
        return done.wait(timeout)

    def stop(self) -> None:
        """Write everything queued, then end the thread."""
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout=60)

    def _run(self) -> None:
        running = True
        while running:
            batch: list[Union[CallRecord, _Durable]] = []
            barriers: list[threading.Event] = []
            running = self._collect(batch, barriers)
            self._write(batch)
            for b in barriers:
                b.set()

    def _collect(self, batch: list[Union[CallRecord, _Durable]], barriers: list[threading.Event]) -> bool:
        """Gather items for one transaction; False once the stop marker is seen."""
        item: Optional[_Item] = self._q.get()
        deadline = time.monotonic() + self.interval
        while True:
            if item is None:
                self._drain_rest(batch, barriers)
                return False
            if isinstance(item, threading.Event):
                barriers.append(item)  # a barrier ends the batch: commit now
                return True
            batch.append(item)
            if len(batch) >= MAX_BATCH:
                return True
            try:
                item = (
                    self._q.get(timeout=max(0.0, deadline - time.monotonic()))
                    if self.interval
                    else self._q.get_nowait()
                )
            except queue.Empty:
                return True

    def _drain_rest(self, batch: list[Union[CallRecord, _Durable]], barriers: list[threading.Event]) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, threading.Event):
                barriers.append(item)
            elif item is not None:
                batch.append(item)

    def _write(self, batch: list[Union[CallRecord, _Durable]]) -> None:
        if not batch:
            return
        records = [b.record if isinstance(b, _Durable) else b for b in batch]
        error: Optional[BaseException] = None
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.store.write_calls(records)
                self.written += len(records)
                error = None
                break
            except Exception as exc:  # noqa: BLE001 - keep the proxy serving; retry, then tell every waiter
                error = exc
                logger.exception("writing %d calls failed (attempt %d/%d)", len(records), attempt + 1, WRITE_ATTEMPTS)
                time.sleep(0.1 * (attempt + 1))
        self._track(records, -1)
        if error is not None:
            self.failed_batches += 1
            logger.error("could not store %d call records: %s", len(records), error)
        waiting: dict[asyncio.AbstractEventLoop, list["asyncio.Future[None]"]] = {}
        for b in batch:
            if isinstance(b, _Durable):
                waiting.setdefault(b.loop, []).append(b.done)
        for loop, futures in waiting.items():  # one wake-up of each loop per transaction, not one per call
            loop.call_soon_threadsafe(_resolve, futures, error)


def _resolve(futures: list["asyncio.Future[None]"], error: Optional[BaseException]) -> None:
    for done in futures:
        if done.done():
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(StoreUnavailable(f"the call could not be stored: {error}"))

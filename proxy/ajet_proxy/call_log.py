"""The call log: a background thread that batch-writes LLM calls into the store.

The event loop only appends to a queue; a response is never held up by a database write. The
thread commits whatever has queued every `interval` seconds (default 50 ms) in one transaction.
Guarantee: a call answered more than FLUSH_GUARANTEE_S seconds before a crash is in the store.
`flush()` is a barrier: it returns once every call queued before it is committed (`end_episode`
uses it so an ended episode's calls are all stored before its reward is).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Optional, Union

from ajet_store import Store
from ajet_store.types import CallRecord

logger = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.05
FLUSH_GUARANTEE_S = 0.5
MAX_BATCH = 2048

_Item = Union[CallRecord, threading.Event, None]


class CallLogWriter:
    """Owns one thread; `submit` is safe from any thread or the event loop."""

    def __init__(self, store: Store, interval: float = FLUSH_INTERVAL_S):
        self.store = store
        self.interval = interval
        self._q: "queue.SimpleQueue[_Item]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ajet-call-log", daemon=True)
        self.written = 0
        self.failed_batches = 0

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def submit(self, record: CallRecord) -> None:
        """Queue a call for writing (never blocks)."""
        self._q.put(record)

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
            batch: list[CallRecord] = []
            barriers: list[threading.Event] = []
            running = self._collect(batch, barriers)
            self._write(batch)
            for b in barriers:
                b.set()

    def _collect(self, batch: list[CallRecord], barriers: list[threading.Event]) -> bool:
        """Gather items for one transaction; False once the stop marker is seen."""
        first = self._q.get()
        deadline = time.monotonic() + self.interval
        item: Optional[_Item] = first
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
            wait = deadline - time.monotonic()
            if wait <= 0:
                return True
            try:
                item = self._q.get(timeout=wait)
            except queue.Empty:
                return True

    def _drain_rest(self, batch: list[CallRecord], barriers: list[threading.Event]) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, threading.Event):
                barriers.append(item)
            elif item is not None:
                batch.append(item)

    def _write(self, batch: list[CallRecord]) -> None:
        if not batch:
            return
        for attempt in range(5):
            try:
                self.store.write_calls(batch)
                self.written += len(batch)
                return
            except Exception:  # noqa: BLE001 - keep the proxy serving; retry, then report loudly
                logger.exception("writing %d calls failed (attempt %d/5)", len(batch), attempt + 1)
                time.sleep(0.2 * (attempt + 1))
        self.failed_batches += 1
        logger.error("dropped %d call records after 5 failed writes", len(batch))

"""The call log: LLM calls group-committed into the store (`ajet_proxy.group_commit`).

A handler awaits `commit(record)` before its answer leaves: the record is durable when the agent sees the answer,
so every answered call is in the store, even after a SIGKILL of the proxy. While one commit runs, the calls
answered meanwhile queue up and share the next, so a call waits a few milliseconds and the commit cost is shared
by its neighbours. `submit` (no wait) is for records of calls that were never answered (a disconnect, no
reachable engine). `flush()` is a barrier: it returns once every call queued before it is committed.
`pending(uuid)` says whether an episode has calls queued and not yet committed: `end_episode` flushes only then
(usually its calls were committed before their answers left).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from ajet_proxy.group_commit import GroupCommitter
from ajet_store import Store, StoreRefusedValue, StoreWriteFailed
from ajet_store.types import CallRecord

logger = logging.getLogger(__name__)

WRITE_ATTEMPTS = 3


class CallWriter:
    """The call log's group committer (one thread of its own); `submit` is safe from any thread or the loop."""

    def __init__(self, store: Store, interval: float = 0.0):
        self.store = store
        self.interval = interval
        """Extra seconds to gather a batch after its first record (0: take what is queued, commit at once)."""
        self._pending: dict[str, int] = {}
        """Episode uuid -> its records queued and not yet written (or given up on)."""
        self._pending_lock = threading.Lock()
        self.written = 0
        self.failed_batches = 0
        self._committer: GroupCommitter[CallRecord, None] = GroupCommitter(
            self._write,
            "ajet-call-log",
            window_s=interval,
            on_committed=lambda records: self._track(records, -1),
            split_on=(StoreRefusedValue,),
        )

    def start(self) -> None:
        """Start the writer thread."""
        self._committer.start()

    def stop(self) -> None:
        """Write everything queued, then end the thread."""
        self._committer.stop()

    def submit(self, record: CallRecord) -> None:
        """Queue a call for writing without waiting (for calls that were never answered)."""
        self._track([record], +1)
        self._committer.submit(record)

    async def commit(self, record: CallRecord) -> None:
        """Return once `record` is committed; `StoreWriteFailed` when it could not be written, `StoreRefusedValue`
        when the database refused one of its values (the records it was batched with are written without it)."""
        self._track([record], +1)
        await self._committer.commit(record)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every call queued so far is committed; False on timeout."""
        return self._committer.flush(timeout)

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

    def _write(self, records: list[CallRecord]) -> list[Optional[BaseException]]:
        """One transaction of records, retried; each record's result (None: stored). A refused value is raised at
        once: retrying the same values cannot help, and the committer then writes the records one by one."""
        error: Optional[BaseException] = None
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.store.write_calls(records)
                self.written += len(records)
                return [None] * len(records)
            except StoreRefusedValue:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the proxy serving; retry, then tell every waiter
                error = exc
                logger.exception("writing %d calls failed (attempt %d/%d)", len(records), attempt + 1, WRITE_ATTEMPTS)
                time.sleep(0.1 * (attempt + 1))
        self.failed_batches += 1
        logger.error("could not store %d call records: %s", len(records), error)
        return [StoreWriteFailed(f"the call could not be stored: {error}")] * len(records)

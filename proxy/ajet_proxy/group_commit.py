"""Group commit: one thread that writes whatever is queued in one store transaction, for the call log and the
episode life cycle alike.

Items are queued from the event loop (or any thread); the thread takes everything queued at that moment (or,
with a window, what arrives within it after the first) and hands the batch to `commit_batch`, which returns one
result per item: the item's answer, or the exception that refused it. While one transaction runs, the items that
arrive queue up and share the next, so under load a transaction's fixed cost (BEGIN, COMMIT, the thread hop) is
shared by dozens of items, and with a single caller it costs what one transaction per item did. Every loop that
waits is woken once per transaction, not once per item.

Besides items, the thread takes barriers (`flush`: returns once everything queued before it is committed) and
calls (`run`: a function run on the thread in queue order, for other store work that must not contend for
SQLite's write lock with the commits).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar, Union

logger = logging.getLogger(__name__)

I = TypeVar("I")  # noqa: E741 - the item type, beside R
R = TypeVar("R")
T = TypeVar("T")

MAX_BATCH = 2048
"""Most items one transaction takes."""


@dataclass
class _Waiter:
    """Where an awaited item's result goes: a future of `loop`, resolved from the thread."""

    loop: asyncio.AbstractEventLoop
    done: "asyncio.Future[Any]"


@dataclass
class _Entry(Generic[I]):
    item: I
    waiter: Optional[_Waiter]


@dataclass
class _Call:
    """A function to run on the thread, in queue order (`GroupCommitter.run`)."""

    fn: Callable[[], Any]
    waiter: _Waiter


_STOP = object()
_Queued = Union[_Entry[Any], _Call, threading.Event, object]
_Results = list[tuple["asyncio.Future[Any]", Any, Optional[BaseException]]]
"""What one loop is woken with: each future, its result, and the error to raise instead (or None)."""


class GroupCommitter(Generic[I, R]):
    """Commits queued items in batches on one thread of its own (`name`)."""

    def __init__(
        self,
        commit_batch: Callable[[list[I]], Sequence[Union[R, BaseException]]],
        name: str,
        window_s: float = 0.0,
        on_committed: Optional[Callable[[list[I]], None]] = None,
        split_on: tuple[type[BaseException], ...] = (),
    ):
        self.commit_batch = commit_batch
        self.window_s = window_s
        """Extra seconds to gather a batch after its first item (0: take what is queued, commit at once)."""
        self.on_committed = on_committed
        """Called on the thread with each batch once its results are known (before any waiter wakes)."""
        self.split_on = split_on
        """Errors that blame one item, not the transaction (a value the database refused): a batch that raised
        one is committed again item by item, so only the item that carries it fails and the rest commit."""
        self._q: "queue.SimpleQueue[_Queued]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.transactions = 0
        """Batches committed so far (items / transactions: how many items shared one)."""
        self.items = 0

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Commit everything queued, then end the thread."""
        if self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(timeout=60)

    def submit(self, item: I) -> None:
        """Queue `item` without waiting for it (its result is dropped)."""
        self._q.put(_Entry(item, None))

    async def commit(self, item: I) -> R:
        """Queue `item` and return its result once its transaction committed (raise what refused it)."""
        waiter = self._waiter()
        self._q.put(_Entry(item, waiter))
        result: R = await waiter.done
        return result

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the thread, after everything queued before it."""
        waiter = self._waiter()
        self._q.put(_Call(lambda: fn(*args), waiter))
        result: T = await waiter.done
        return result

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far is committed; False on timeout."""
        if not self._thread.is_alive():
            return True
        done = threading.Event()
        self._q.put(done)
        return done.wait(timeout)

    def _waiter(self) -> _Waiter:
        """A future for one awaited item or call; `RuntimeError` once the thread has stopped (nothing would
        resolve it)."""
        if not self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} is not running (the proxy is stopping)")
        loop = asyncio.get_running_loop()
        return _Waiter(loop, loop.create_future())

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        running = True
        while running:
            batch: list[_Entry[I]] = []
            running, after = self._collect(batch)
            self._commit(batch)
            if isinstance(after, threading.Event):
                after.set()
            elif isinstance(after, _Call):
                _settle({after.waiter.loop: [(after.waiter.done, *_call(after.fn))]})

    def _collect(self, batch: list[_Entry[I]]) -> tuple[bool, object]:
        """Gather one transaction's items; (False once the stop marker is seen, the barrier or call that ended
        the batch, if any)."""
        queued = self._q.get()
        deadline = time.monotonic() + self.window_s
        while True:
            if queued is _STOP:
                self._drain_rest(batch)
                return False, None
            if isinstance(queued, (threading.Event, _Call)):
                return True, queued  # committed after this batch, in queue order
            assert isinstance(queued, _Entry)
            batch.append(queued)
            if len(batch) >= MAX_BATCH:
                return True, None
            try:
                left = deadline - time.monotonic()
                queued = self._q.get(timeout=max(0.0, left)) if self.window_s else self._q.get_nowait()
            except queue.Empty:
                return True, None

    def _drain_rest(self, batch: list[_Entry[I]]) -> None:
        """At stop: everything still queued joins the last batch; barriers are released, calls refused."""
        while True:
            try:
                queued = self._q.get_nowait()
            except queue.Empty:
                return
            if isinstance(queued, _Entry):
                batch.append(queued)
            elif isinstance(queued, threading.Event):
                queued.set()
            elif isinstance(queued, _Call):
                error = RuntimeError("the proxy is stopping")
                _settle({queued.waiter.loop: [(queued.waiter.done, None, error)]})

    def _commit(self, batch: list[_Entry[I]]) -> None:
        if not batch:
            return
        items = [e.item for e in batch]
        try:
            results: Sequence[Union[R, BaseException]] = self.commit_batch(items)
        except Exception as exc:  # noqa: BLE001 - the transaction rolled back: every waiter hears why
            results = self._one_by_one(items, exc)
        self.transactions += 1
        self.items += len(items)
        if self.on_committed is not None:
            self.on_committed(items)
        waiting: dict[asyncio.AbstractEventLoop, _Results] = {}
        for entry, result in zip(batch, results):
            if entry.waiter is not None:
                error = result if isinstance(result, BaseException) else None
                waiting.setdefault(entry.waiter.loop, []).append((entry.waiter.done, result, error))
        _settle(waiting)

    def _one_by_one(self, items: list[I], exc: Exception) -> list[Union[R, BaseException]]:
        """After a batch rolled back with `exc`: every item's result. An error that blames one item (`split_on`)
        has each item committed in a transaction of its own; any other error is every item's answer."""
        if len(items) == 1 or not isinstance(exc, self.split_on):
            return [exc] * len(items)
        logger.warning("a batch of %d rolled back (%s); committing them one by one", len(items), exc)
        out: list[Union[R, BaseException]] = []
        for item in items:
            try:
                out.extend(self.commit_batch([item]))
            except Exception as one:  # noqa: BLE001 - this item's own answer
                out.append(one)
        return out


def _call(fn: Callable[[], Any]) -> tuple[Any, Optional[BaseException]]:
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - handed to the caller
        return None, exc


def _settle(waiting: dict[asyncio.AbstractEventLoop, _Results]) -> None:
    """Wake each loop once, with every result it waits for."""
    for loop, results in waiting.items():
        try:
            loop.call_soon_threadsafe(_resolve, results)
        except RuntimeError:  # the loop closed meanwhile: nobody is left to tell
            logger.debug("a waiting event loop closed before its results")


def _resolve(results: _Results) -> None:
    for done, result, error in results:
        if done.done():  # its handler was cancelled (client gone); the item itself stands
            continue
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

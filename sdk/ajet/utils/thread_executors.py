"""Thread executors for running many episodes from one client.

Retries are logged, never silent: each failure is logged with its traceback. `run_episodes_until_all_complete`
retries a failing episode until it completes, as AgentJet's own client does (`max_retries` bounds it);
a task that still fails after its bounded retries is reported as failed (None in results).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_RETRIES = 3


RETRY_BACKOFF_S = (0.5, 10.0)
"""The pause before a retry: the first, then doubling up to the second (a persistent failure does not spin)."""


def call_with_retries(fn: Callable[[T], R], task: T, retries: Optional[int]) -> Optional[R]:
    """`fn(task)`, retried on exceptions (each logged with its traceback): up to `retries` times, or until it
    succeeds when `retries` is None. None (and an error log) once the retries are spent."""
    attempt = 0
    while True:
        try:
            return fn(task)
        except Exception as exc:  # noqa: BLE001 - agent code may raise anything; we log and count it
            attempt += 1
            if retries is not None and attempt > retries:
                logger.error("task %s failed after %d attempt(s): %r", _task_name(task), attempt, exc, exc_info=True)
                return None
            bound = "" if retries is None else f"/{retries}"
            logger.warning("task %s failed (%r); retry %d%s", _task_name(task), exc, attempt, bound, exc_info=True)
            time.sleep(min(RETRY_BACKOFF_S[1], RETRY_BACKOFF_S[0] * 2 ** (attempt - 1)))


def _task_name(task: Any) -> str:
    return str(getattr(task, "task_id", task))[:60]


def run_episodes_until_all_complete(
    tasks: Iterable[T],
    func: Callable[[T], R],
    max_workers: Optional[int] = None,
    auto_retry: bool = True,
    max_retries: Optional[int] = None,
) -> list[Optional[R]]:
    """Run `func(task)` for every task, on `max_workers` threads (default: one per task); results in task order.

    With `auto_retry` a failing episode is retried until it completes (as AgentJet's client does), each failure
    logged with its traceback; `max_retries` bounds the retries (then its result is None). Without
    `auto_retry` a failure is logged and its result is None."""
    items = list(tasks)
    if not items:
        return []
    retries = max_retries if auto_retry else 0
    with ThreadPoolExecutor(max_workers=max_workers or len(items)) as pool:
        futures = [pool.submit(call_with_retries, func, t, retries) for t in items]
        return [f.result() for f in futures]


class BoundedThreadPoolExecutor(ThreadPoolExecutor):
    """A thread pool whose `submit` blocks while `max_workers` tasks are queued or running."""

    def __init__(self, max_workers: int, **kwargs: Any):
        super().__init__(max_workers=max_workers, **kwargs)
        self._slots = threading.BoundedSemaphore(max_workers)

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> "Future[R]":
        self._slots.acquire()
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        return future


class PeriodicDrainThreadPoolExecutor:
    """Submits episodes and, every `workers` submissions, waits until all in flight have finished.

    This keeps one client's episodes aligned with training steps: a batch is submitted, drained,
    then the next one starts. `max_parallel` caps concurrent threads (default: `workers`).
    """

    def __init__(
        self,
        workers: int,
        max_parallel: Optional[int] = None,
        auto_retry: bool = True,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ):
        self.workers = workers
        self.retries = max_retries if auto_retry else 0
        self._pool = ThreadPoolExecutor(max_workers=max_parallel or workers)
        self._inflight: list[Future] = []
        self._submitted = 0

    def submit_with_periodic_drain(self, fn: Callable[[T], R], task: T) -> "Future[Optional[R]]":
        """Submit `fn(task)`; after every `workers` submissions, drain."""
        future = self._pool.submit(call_with_retries, fn, task, self.retries)
        self._inflight.append(future)
        self._submitted += 1
        if self._submitted % self.workers == 0:
            self.drain()
        return future

    def drain(self) -> list[Any]:
        """Wait for every submitted task; returns their results."""
        results = [f.result() for f in self._inflight]
        self._inflight.clear()
        return results

    def shutdown(self, wait: bool = True) -> None:
        """Drain (when `wait`) and stop the threads."""
        if wait:
            self.drain()
        self._pool.shutdown(wait=wait)

    def __enter__(self) -> "PeriodicDrainThreadPoolExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

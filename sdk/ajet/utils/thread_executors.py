"""Thread executors for running many episodes from one client.

Retries are bounded and logged, never silent: a task that still fails after its retries is logged
with its exception and reported as failed (None in results).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_RETRIES = 3


def call_with_retries(fn: Callable[[T], R], task: T, retries: int) -> Optional[R]:
    """`fn(task)`, retried up to `retries` times on exceptions; None (and an error log) after that."""
    for attempt in range(retries + 1):
        try:
            return fn(task)
        except Exception as exc:  # noqa: BLE001 - agent code may raise anything; we log and count it
            if attempt == retries:
                logger.error("task %s failed after %d attempt(s): %r", _task_name(task), attempt + 1, exc)
                return None
            logger.warning("task %s failed (%r); retry %d/%d", _task_name(task), exc, attempt + 1, retries)
    return None


def _task_name(task: Any) -> str:
    return str(getattr(task, "task_id", task))[:60]


def run_episodes_until_all_complete(tasks: Iterable[T], func: Callable[[T], R], max_workers: int = 32,
                                    auto_retry: bool = True, max_retries: int = DEFAULT_MAX_RETRIES
                                    ) -> list[Optional[R]]:
    """Run `func(task)` for every task on `max_workers` threads; results in task order."""
    retries = max_retries if auto_retry else 0
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        futures = [pool.submit(call_with_retries, func, t, retries) for t in tasks]
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

    def __init__(self, workers: int, max_parallel: Optional[int] = None, auto_retry: bool = True,
                 max_retries: int = DEFAULT_MAX_RETRIES):
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

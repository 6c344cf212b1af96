"""Waiting out a store that is away (a PostgreSQL restart, a failover, a full disk): the trainer keeps its model in
memory and retries with backoff, says so once in the log, and gives up only past `store_outage_s`.

Two places wait: the run loop (`StoreOutage`, between ticks: nothing in memory is ahead of the store), and a
session's writes after an update (`until_stored`: the model is a step ahead of the store, so the write is retried
in place, the model kept, rather than dropped for the last checkpoint)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional, TypeVar

from ajet.errors import StoreUnavailable
from ajet_trainer.errors import TrainerError

T = TypeVar("T")

logger = logging.getLogger(__name__)

FIRST_DELAY_S, MAX_DELAY_S = 0.5, 5.0
"""The backoff between two tries: doubling from the first to the most."""


class StoreOutage:
    """The trainer's view of one outage of its store (`since` None: the store answers)."""

    def __init__(self, max_s: float):
        self.max_s = max_s
        self.since: Optional[float] = None
        self.delay = FIRST_DELAY_S

    def wait(self, exc: StoreUnavailable, stop: threading.Event) -> None:
        """The store refused a read or a write: wait before the next try (logged once per outage); re-raise `exc`
        once the store has been away longer than `max_s`."""
        now = time.monotonic()
        if self.since is None:
            self.since, self.delay = now, FIRST_DELAY_S
            logger.warning(
                "the store is away (%s): waiting for it up to %.0fs, the model kept in memory", exc.detail, self.max_s
            )
        elif now - self.since > self.max_s:
            logger.error("the store has been away for %.0fs (more than store_outage_s): stopping", now - self.since)
            raise exc
        stop.wait(self.delay)
        self.delay = min(self.delay * 2, MAX_DELAY_S)

    def answered(self) -> None:
        """The store answered: an outage, if any, is over (logged once)."""
        if self.since is not None:
            logger.warning("the store is back after %.1fs", time.monotonic() - self.since)
            self.since = None


class StepNotRecorded(TrainerError):
    """A step computed in memory whose record the store did not take within `store_outage_s`; the message says
    truthfully what became of it (kept in a checkpoint that carries its record, or lost)."""

    def __init__(self, message: str, cause: StoreUnavailable, kept: bool):
        super().__init__(message)
        self.cause = cause
        """The store's error: the run loop waits for the store on it."""
        self.kept = kept
        """Whether the step is kept (the session's close may then checkpoint); False: it is lost, and no checkpoint
        may be written for it without its record."""


def until_stored(write: Callable[[], T], max_s: float) -> T:
    """Run a store write the in-memory model is ahead of (an update's record), waiting out an outage in place, the
    model kept; the store's error once it has been away longer than `max_s`."""
    outage, never = StoreOutage(max_s), threading.Event()
    while True:
        try:
            done = write()
        except StoreUnavailable as exc:
            outage.wait(exc, never)
            continue
        outage.answered()
        return done

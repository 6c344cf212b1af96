"""Admission of one experiment's calls to the engines: at most its job's `max_calls_in_flight` at once (per proxy),
the rest waiting in arrival order. On a swarm whose experiments share one engine it bounds each one's share of the
engine's batch, so an experiment whose agents fan out cannot take every row while the others' calls queue.

A waiting call holds no place in an engine's batch and no connection. A call whose client leaves while it waits
leaves the queue; a call let in holds its place until it is over (`InFlightCall.finish`), streamed answers to their
last chunk. A cap lowered by a new sync applies as calls end; a cap raised lets the queue in as calls end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Optional


class CallGate:
    """One experiment's calls at the engines, and those waiting for a place."""

    def __init__(self) -> None:
        self.running = 0
        """Calls let in and not yet over."""
        self.waiting: deque[asyncio.Future[None]] = deque()
        """Calls waiting for a place, first come first."""
        self.waited = 0
        """Calls that had to wait since the start (the cap at work)."""

    async def enter(self, cap: Optional[int]) -> None:
        """Return once the call may go to an engine: at once under the cap (None: no cap) with nobody waiting."""
        if cap is None or (self.running < cap and not self.waiting):
            self.running += 1
            return
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(place)
        self.waited += 1
        try:
            await place  # `leave` hands a place over: `running` stays as it was
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():  # handed a place as the client left: pass it on
                self.leave(cap)
            elif place in self.waiting:
                self.waiting.remove(place)
            raise

    def leave(self, cap: Optional[int]) -> None:
        """A call let in is over: its place goes to the first call still waiting, unless the cap is now lower."""
        while self.waiting and (cap is None or self.running <= cap):
            place = self.waiting.popleft()
            if not place.done():
                place.set_result(None)
                return
        self.running -= 1

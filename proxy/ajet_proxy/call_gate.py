"""Admission of one experiment's calls to the engines: at most its job's `max_calls_in_flight` at once in the whole
swarm, the rest waiting in arrival order. On a swarm whose experiments share one engine it bounds each one's share
of the engine's batch, so an experiment whose agents fan out cannot take every row while the others' calls queue.

Several proxies split the cap: each admits its share (`proxy_share`) of the live proxies the first store lists
(`ajet_store.proxies`, a beat a second), so no call costs a store round trip. A share is fixed between beats: a
proxy whose share is taken while another has room does not borrow it (the price of no per-call coordination). When
proxies come or go, the shares change at the next beat: a lowered one drains as calls end, a raised one lets its
queue in at once (`admit_waiting`).

A waiting call holds no place in an engine's batch and no connection. A call whose client leaves while it waits
leaves the queue; a call let in holds its place until it is over (`InFlightCall.finish`), streamed answers to their
last chunk. A cap lowered by a new sync applies as calls end; a cap raised lets the queue in as calls end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Optional, Sequence


def proxy_share(cap: Optional[int], proxies: Sequence[str], me: str) -> Optional[int]:
    """This proxy's part of a swarm-wide `cap` among the live `proxies` (sorted ids, `me` among them): an even split,
    the remainder to the first in order, so the parts add up to the cap. A cap below the number of proxies leaves
    some with none: their calls wait until a proxy leaves (the cap holds). None: no cap."""
    if cap is None:
        return None
    n = max(len(proxies), 1)
    rank = proxies.index(me) if me in proxies else n - 1
    return cap // n + (1 if rank < cap % n else 0)


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

    def _next_waiting(self) -> Optional[asyncio.Future[None]]:
        """The first call still waiting, taken off the queue (those whose client left are dropped); None if none."""
        while self.waiting:
            place = self.waiting.popleft()
            if not place.done():
                return place
        return None

    def admit_waiting(self, cap: Optional[int]) -> None:
        """Let waiting calls in while there is room under `cap` (a share raised when another proxy left)."""
        while cap is None or self.running < cap:
            place = self._next_waiting()
            if place is None:
                return
            self.running += 1
            place.set_result(None)

    def leave(self, cap: Optional[int]) -> None:
        """A call let in is over: its place goes to the first call still waiting, unless the cap is now lower."""
        place = self._next_waiting() if cap is None or self.running <= cap else None
        if place is None:
            self.running -= 1
        else:
            place.set_result(None)

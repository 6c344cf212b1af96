"""The proxies serving a swarm: each beats in the first store every second, and reads which are alive.

What they share this way is each experiment's `max_calls_in_flight`: a cap of the swarm, which the live proxies
split between them (`ajet_proxy.call_gate.proxy_share`), so calls spread over several proxies never reach the engines
beyond it. A proxy that stops leaves the table; one that dies is alive no more once its last beat is `PROXY_LIVE_S`
old, and its row goes after `PROXY_FORGET_S`.
"""

from __future__ import annotations

import sqlalchemy as sa

from ajet_store import tables as t
from ajet_store.db import Database, retried

PROXY_LIVE_S = 5.0
"""A proxy whose last beat is older than this is not counted (it beats every second)."""
PROXY_FORGET_S = 60.0
"""A proxy's row is removed once its last beat is this old (a proxy that died without leaving)."""


class ProxyOps(Database):
    """The swarm's proxies (read and written in the first store only)."""

    @retried
    def beat_proxy(self, proxy_id: str, now: float) -> list[str]:
        """Record that proxy `proxy_id` is alive at `now`; the ids of every live proxy, itself included, sorted."""
        table = t.swarm_proxies
        with self._tx() as c:
            beat = c.execute(table.update().where(table.c.proxy_id == proxy_id).values(beat_at=now))
            if beat.rowcount == 0:
                c.execute(table.insert().values(proxy_id=proxy_id, started_at=now, beat_at=now))
            c.execute(table.delete().where(table.c.beat_at < now - PROXY_FORGET_S))
            live = c.execute(sa.select(table.c.proxy_id).where(table.c.beat_at >= now - PROXY_LIVE_S))
            return sorted(live.scalars())

    @retried
    def leave_proxy(self, proxy_id: str) -> None:
        """Proxy `proxy_id` stops serving: the others count it no more."""
        with self._tx() as c:
            c.execute(t.swarm_proxies.delete().where(t.swarm_proxies.c.proxy_id == proxy_id))

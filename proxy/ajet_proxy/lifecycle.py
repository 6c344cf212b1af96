"""Group commit of the episode life cycle: begins and ends queued meanwhile share one store transaction.

Each `begin_episode` / `end_episode` handler awaits `EpisodeCommitter.apply(change)`; the change is durable when
it returns. Changes run on the proxy's one episode thread (`ajet_proxy.group_commit`), so they never contend for
SQLite's write lock with each other; while one transaction runs, the changes that arrive queue up and go together
in the next one, so under load a transaction's fixed cost (BEGIN IMMEDIATE, the engine read, COMMIT, the thread
hop) is shared by dozens of episodes, and with a single client it costs what one transaction per change did. The
episode routes' other store work (an abort, a mission's admission) runs on the same thread with `run`.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ajet_proxy.group_commit import GroupCommitter
from ajet_store import EpisodeChange, EpisodeRow, Store, StoreRefusedValue

T = TypeVar("T")


class EpisodeCommitter:
    """Commits episode changes in batches on the episode thread."""

    def __init__(self, store: Store):
        self.store = store
        self._committer: GroupCommitter[EpisodeChange, EpisodeRow] = GroupCommitter(
            store.apply_changes, "ajet-episodes", split_on=(StoreRefusedValue,)
        )

    @property
    def transactions(self) -> int:
        """Transactions run so far (changes / transactions: how many changes shared one)."""
        return self._committer.transactions

    @property
    def changes(self) -> int:
        """Changes committed so far."""
        return self._committer.items

    def start(self) -> None:
        """Start the episode thread."""
        self._committer.start()

    def stop(self) -> None:
        """Commit what is queued, then end the thread."""
        self._committer.stop()

    async def apply(self, change: EpisodeChange) -> EpisodeRow:
        """Commit `change` (with whatever else is queued); its episode row, or the `StoreError` that refused it."""
        return await self._committer.commit(change)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` (other episode store work) on the episode thread, in turn with the commits."""
        return await self._committer.run(fn, *args)

"""Store errors: domain errors with no HTTP in them. The proxy maps each to a status in one table.

`StoreError` is the root. The subclasses say what went wrong in the store's own terms; `state` names
the engine state when it matters to the caller (a client waits for ROLLING, a trainer sees a stop).
"""

from __future__ import annotations

from typing import Optional


class StoreError(Exception):
    """Root of every store error."""

    def __init__(self, detail: str, *, state: Optional[str] = None):
        super().__init__(detail)
        self.detail = detail
        self.state = state


class NotFound(StoreError):
    """No row with that key (e.g. an unknown episode uuid)."""


class Conflict(StoreError):
    """The row's status conflicts with the change (end after abort, another reward, another client)."""


class WrongState(StoreError):
    """The engine state does not allow the change (the state is named)."""


class NotRolling(StoreError):
    """Episodes begin only in ROLLING with a live trainer; the caller should retry later."""


class TrainerSilent(NotRolling):
    """The engine is ROLLING but the trainer's heartbeat is older than the store's timeout: it is down, or it
    cannot write (see `Store.probe_write`). `silent_s` is the heartbeat's age."""

    def __init__(self, detail: str, *, state: Optional[str] = None, silent_s: float = 0.0):
        super().__init__(detail, state=state)
        self.silent_s = silent_s


class StoreUnavailable(StoreError):
    """The store URL is malformed, its database cannot be opened or created, or a write failed for good."""


class StoreWriteFailed(StoreUnavailable):
    """The database refused a write for a cause of its own (disk full, read-only, connection lost); nothing of
    that transaction was committed, and a retry may succeed once the cause is gone."""


class StoreRefusedValue(StoreError):
    """The database refused a value of the change (too long for its column, a NUL character, a non-finite JSON
    number) that validation let through; nothing of that transaction was committed."""


class SchemaMismatch(StoreError):
    """The store was written by another schema version than this code's."""


class AlreadyConsumed(StoreError):
    """A step would consume an episode that another step consumed, or one that has not ended."""

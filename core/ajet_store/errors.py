"""What only the store raises: `StoreError` (the SDK's, `ajet.errors`) and its branch here. No HTTP in them: each
class's `code` says how the proxy answers it.

The store also raises the wire errors every package shares, from `ajet.errors`: `EpisodeNotFound` (no row with
that key), `EpisodeConflict` (the row's status conflicts with the change), `WrongState` (the experiment's state does
not allow it), `NotReady` (episodes begin only in ROLLING) and `TrainerUnresponsive` (ROLLING, but the trainer's
heartbeat is old: it is down, or it cannot write, see `Store.probe_write`).
"""

from __future__ import annotations

from ajet.errors import StoreError, StoreUnavailable
from ajet.protocol import ErrorCode

__all__ = [
    "AlreadyConsumed",
    "SchemaMismatch",
    "StoreError",
    "StoreRefusedValue",
    "StoreUnavailable",
    "StoreWriteFailed",
    "TrainerHolds",
]


class StoreWriteFailed(StoreUnavailable):
    """The database refused a write for a cause of its own (disk full, read-only, connection lost); nothing of
    that transaction was committed, and a retry may succeed once the cause is gone."""


class StoreRefusedValue(StoreError):
    """The database refused a value of the change (too long for its column, a NUL character, a non-finite JSON
    number) that validation let through; nothing of that transaction was committed. The request's fault: answered
    as an invalid request."""

    code = ErrorCode.INVALID_REQUEST


class TrainerHolds(StoreError):
    """Another live trainer holds the store (its heartbeat is recent): a second one would consume the same episodes
    and stop everyone's training. The message names the holder's host, pid and heartbeat age."""


class SchemaMismatch(StoreError):
    """The store was written by another schema version than this code's."""


class AlreadyConsumed(StoreError):
    """A step would consume an episode that another step consumed, or one that has not ended."""


class UnknownRewardVersion(StoreError):
    """A reward version the store does not have (a selection's `scored_in`, a replay's source)."""

    code = ErrorCode.INVALID_REQUEST

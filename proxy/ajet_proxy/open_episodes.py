"""Episode keys and the in-memory registry of open episodes (the data plane's auth table).

Keys are 256-bit random tokens; only their sha256 is stored. The registry maps key hashes to live
episodes so authenticating a call is one dict lookup; it is rebuilt from the store at start-up, so
open episodes carry on with their keys after a proxy restart, and reconciled with the store
periodically, so episodes the trainer expires stop working here too.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ajet.types import EpisodeStatus
from ajet_proxy.token_history import Turn
from ajet_store.types import EpisodeRow

KEY_PREFIX = "ajet-ep-"


def new_episode_key() -> str:
    """A fresh episode key: 32 random bytes, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The sha256 hex digest the store keeps instead of the key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class LiveEpisode:
    """Mutable state of one open episode, owned by the proxy's event loop."""

    uuid: str
    key_hash: str
    client_id: str
    episode_type: str
    timeout_s: float
    created_at: float
    last_active: float
    next_seq: int = 0
    in_flight: int = 0
    deployment: Optional[str] = None
    responses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Responses API: each response's conversation (chat messages) by response id, for `previous_response_id`
    (a cache: a miss is rebuilt from the response's logged call, `Store.response_call`)."""
    turn: Optional[Turn] = None
    """The episode's last answered call, as its next call may extend it (`ajet_proxy.token_history`)."""
    turn_from_store: bool = False
    """Whether `turn` is to be read from the store first: the episode had calls before this proxy knew it (or,
    with a shared store, another proxy served its last call)."""
    turn_seq: int = -1
    """The call number `turn` came from (-1: none)."""

    def idle(self, now: float) -> float:
        """Seconds since the last activity (0 while a call is in flight)."""
        return 0.0 if self.in_flight else max(0.0, now - self.last_active)


def closed_reason(row: EpisodeRow) -> Optional[str]:
    """Why an episode is over (ended, aborted, expired), or None while it is open."""
    if row.status == EpisodeStatus.ENDED:
        return f"episode {row.uuid} has ended (end_episode)"
    if row.status == EpisodeStatus.ABORTED:
        return f"episode {row.uuid} was aborted (abort_episode, or the engine was stopped)"
    if row.status == EpisodeStatus.EXPIRED:
        return f"episode {row.uuid} expired after {row.timeout_s:g} s without a call"
    return None


def refused_key_reason(row: Optional[EpisodeRow]) -> str:
    """Why a key that is not live was refused, from its episode (None: no episode has that key)."""
    if row is None:
        return "unknown episode key: no episode has it (keys come from begin_episode)"
    closed = closed_reason(row)
    if closed is not None:
        return f"{closed}; its key no longer works"
    return f"episode {row.uuid} is not known to this proxy yet; retry"  # a single proxy's insert not yet read


def live_from_row(row: EpisodeRow, next_seq: int) -> LiveEpisode:
    """An open episode's live state, from its store row (its next call numbered `next_seq`; its last turn, if it
    had calls, to be read from the store)."""
    return LiveEpisode(
        uuid=row.uuid,
        key_hash=row.key_hash,
        client_id=row.client_id,
        episode_type=row.episode_type,
        timeout_s=row.timeout_s,
        created_at=row.created_at,
        last_active=row.last_active_at,
        next_seq=next_seq,
        turn_from_store=next_seq > 0,
    )


class EpisodeRegistry:
    """Open episodes by key hash and by uuid. Thread-safe for the control routes' thread pool."""

    def __init__(self) -> None:
        self._by_hash: dict[str, LiveEpisode] = {}
        self._by_uuid: dict[str, LiveEpisode] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_uuid)

    def add_row(self, row: EpisodeRow, next_seq: int = 0) -> LiveEpisode:
        """Register an open episode from its store row; its next call is numbered `next_seq`."""
        ep = live_from_row(row, next_seq)
        with self._lock:
            known = self._by_uuid.get(ep.uuid)
            if known is not None:  # a retried begin gave it a new key: the lost one stops working
                self._by_hash.pop(known.key_hash, None)
            self._by_hash[ep.key_hash] = ep
            self._by_uuid[ep.uuid] = ep
        return ep

    def by_key_hash(self, key_hash: str) -> Optional[LiveEpisode]:
        """The open episode of a key hash (dict lookup, no lock needed for reads)."""
        return self._by_hash.get(key_hash)

    def by_uuid(self, uuid: str) -> Optional[LiveEpisode]:
        """The open episode of that id, if this proxy has it open."""
        return self._by_uuid.get(uuid)

    def remove(self, uuids: Iterable[str]) -> None:
        """Forget episodes (ended, aborted, expired)."""
        with self._lock:
            for uuid in uuids:
                ep = self._by_uuid.pop(uuid, None)
                if ep is not None:
                    self._by_hash.pop(ep.key_hash, None)

    def clear(self) -> None:
        """Forget every episode (engine stopped)."""
        with self._lock:
            self._by_hash.clear()
            self._by_uuid.clear()

    def snapshot(self) -> list[LiveEpisode]:
        """A copy of the live episodes."""
        with self._lock:
            return list(self._by_uuid.values())

    def idle_expired(self, now: Optional[float] = None) -> list[str]:
        """Uuids of episodes idle longer than their timeout."""
        now = time.time() if now is None else now
        return [ep.uuid for ep in self.snapshot() if ep.idle(now) > ep.timeout_s]

    def reconcile(self, open_uuids: set[str], read_at: float, grace_s: float = 5.0) -> list[str]:
        """Forget episodes the store no longer has open (expired or stopped by the trainer).

        `open_uuids` was read from the store at `read_at`; episodes created within `grace_s` of that
        read are kept, since their insert may have committed after it. Returns the uuids removed.
        """
        stale = [ep.uuid for ep in self.snapshot() if ep.uuid not in open_uuids and ep.created_at < read_at - grace_s]
        self.remove(stale)
        return stale

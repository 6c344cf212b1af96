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
from typing import Iterable, Optional

from ajet.types import EpisodeStatus
from ajet_core.records import carried
from ajet_proxy.episode_history import EpisodeHistory
from ajet_store.placement import DEFAULT_SLUG
from ajet_store.types import EpisodeRow

KEY_PREFIX = "ajet-ep-"


def new_episode_key() -> str:
    """A fresh episode key: 32 random bytes, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    """The sha256 hex digest the store keeps instead of the key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass
class OpenEpisode:
    """One open episode as this proxy serves it, owned by the proxy's event loop: it changes only through its own
    methods (a call starting and finishing, its number, the engine it sticks to, its history)."""

    uuid: str
    """The episode's id."""
    key_hash: str
    """sha256 of its key (the registry's index)."""
    client_id: str
    """The client that began it."""
    episode_type: str
    """`train` or `eval`."""
    timeout_s: float
    """Seconds without a call after which it expires."""
    created_at: float
    """Unix time it began."""
    last_active_at: float
    """Unix time its last call finished (or it began)."""
    next_seq: int = 0
    """The number its next call takes (a single proxy numbers in memory; with a shared store, the store does)."""
    in_flight: int = 0
    """Calls being served now (an episode with one is never idle)."""
    engine: Optional[str] = None
    """The engine it sticks to (prefix-cache reuse), once one answered it."""
    history: EpisodeHistory = field(default_factory=EpisodeHistory)
    """Its answered turns: the token history and Responses' conversations."""
    experiment_slug: str = DEFAULT_SLUG
    """The slug of its experiment (`default`: the swarm's default experiment), whose host on this proxy serves it."""
    stored_images: set[str] = field(default_factory=set)
    """The hashes of the image files its calls stored already (an agent sends its history's images each turn)."""

    def idle(self, now: float) -> float:
        """Seconds since the last activity (0 while a call is in flight)."""
        return 0.0 if self.in_flight else max(0.0, now - self.last_active_at)

    def call_started(self) -> None:
        """A call of this episode is being served."""
        self.in_flight += 1

    def call_finished(self, now: float) -> None:
        """A call ended (answered, refused or cut off): the episode's idle clock starts again."""
        self.in_flight -= 1
        self.last_active_at = now

    def take_number(self) -> int:
        """The next call number (a single proxy's own numbering)."""
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return seq

    def numbered(self, seq: int) -> None:
        """The store gave a call number `seq` (a shared store numbers every proxy's calls)."""
        self.next_seq = seq + 1

    def stick_to(self, engine: Optional[str]) -> None:
        """Send the episode's next calls to `engine` (None: pick again)."""
        self.engine = engine


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


def open_from_row(row: EpisodeRow, next_seq: int, experiment_slug: str = DEFAULT_SLUG) -> OpenEpisode:
    """An open episode of experiment `experiment_slug` as this proxy serves it, from its store row (its next call
    numbered `next_seq`; the turns of calls before it are read from the store when a call needs them)."""
    return carried(OpenEpisode, row, next_seq=next_seq, experiment_slug=experiment_slug)


class OpenEpisodes:
    """Open episodes of one experiment by key hash and by uuid. Thread-safe for the control routes' thread pool."""

    def __init__(self, experiment_slug: str = DEFAULT_SLUG) -> None:
        self.experiment_slug = experiment_slug
        """The slug of the experiment whose episodes these are."""
        self._by_hash: dict[str, OpenEpisode] = {}
        self._by_uuid: dict[str, OpenEpisode] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_uuid)

    def add_row(self, row: EpisodeRow, next_seq: int = 0) -> OpenEpisode:
        """Register an open episode from its store row; its next call is numbered `next_seq`."""
        ep = open_from_row(row, next_seq, self.experiment_slug)
        with self._lock:
            known = self._by_uuid.get(ep.uuid)
            if known is not None:  # a retried begin gave it a new key: the lost one stops working
                self._by_hash.pop(known.key_hash, None)
            self._by_hash[ep.key_hash] = ep
            self._by_uuid[ep.uuid] = ep
        return ep

    def by_key_hash(self, key_hash: str) -> Optional[OpenEpisode]:
        """The open episode of a key hash (dict lookup, no lock needed for reads)."""
        return self._by_hash.get(key_hash)

    def by_uuid(self, uuid: str) -> Optional[OpenEpisode]:
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

    def snapshot(self) -> list[OpenEpisode]:
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

"""Rewards the swarm could not take, kept on the client's disk and sent again: nothing ended is silently lost.

`end_episode` keeps its request here when the swarm's store stays unavailable past the client's `store_max_wait`
(a full disk, a database down) or the swarm cannot be reached at all (it exited after a long outage), then raises
as before. A later `begin_episode` or `end_episode` of any client of the same swarm URL on this machine (or
`resend_kept_rewards()`) sends the kept requests again, each with the client id and experiment it was made with.
Ending is idempotent, so a request the swarm did store before the answer was lost is answered as ended. A request
the swarm refuses for good (the episode expired meanwhile, or was ended with another reward) is dropped with a
warning that says why; one that still meets an outage stays for the next try.

One JSONL file per swarm URL, readable by its owner only, only ever appended (with fsync, under an exclusive
lock: several processes of one machine may share it): a kept request is a line, and so is its settling; the file
is emptied once nothing in it is pending, so a crash can lose no pending request.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

from ajet.errors import SwarmConnectionError, SwarmError

logger = logging.getLogger(__name__)

Outcome = Literal["stored", "refused", "later"]
"""What became of a kept request sent again: stored (or found stored), refused for good, or to try again later."""


@dataclass(frozen=True)
class KeptEnd:
    """An `end_episode` request the swarm could not take."""

    body: dict[str, Any]
    """The request body, as it was sent (episode, task, workflow output)."""
    client_id: str
    """The client that made it: an episode is ended by the client that began it."""
    experiment: Optional[str]
    """The experiment it acted on (None: the swarm's default)."""
    kept_at: float
    """When it was kept (UNIX time)."""

    @property
    def episode_uuid(self) -> str:
        """The episode it ends."""
        return str(self.body.get("episode_uuid"))


def kept_path(folder: Path, server_url: str) -> Path:
    """The file of one swarm's kept requests in `folder`."""
    return folder / f"{hashlib.sha256(server_url.encode()).hexdigest()[:16]}.jsonl"


def default_folder() -> Path:
    """`AJET_KEPT_REWARDS`, else `~/.cache/agentjet/kept_rewards`."""
    return Path(os.environ.get("AJET_KEPT_REWARDS", Path.home() / ".cache" / "agentjet" / "kept_rewards"))


def outcome_of(exc: Optional[BaseException]) -> Outcome:
    """What a resend's error means: none, stored; the store or the swarm still out, later; any other answer of
    the swarm (the episode expired, ended otherwise, unknown), refused for good."""
    if exc is None:
        return "stored"
    if isinstance(exc, SwarmConnectionError) or (isinstance(exc, SwarmError) and exc.status >= 500):
        return "later"
    return "refused"


class KeptRewards:
    """One swarm's kept `end_episode` requests on this machine."""

    def __init__(self, path: Path):
        self.path = path

    def keep(self, end: KeptEnd) -> None:
        """Append `end` (durable once this returns)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._locked() as fh:
            _line_start(fh)
            fh.write(json.dumps(asdict(end)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        logger.warning(
            "the swarm could not take the reward of episode %s; it is kept in %s and sent again at this swarm's "
            "next begin_episode or end_episode (or resend_kept_rewards())",
            end.episode_uuid,
            self.path,
        )

    def pending(self) -> list[KeptEnd]:
        """The kept requests, oldest first (none when the file is missing)."""
        if not self.path.exists():
            return []
        with self._locked() as fh:
            return _read(fh)

    def settle(self, done: dict[str, Outcome]) -> None:
        """Mark the requests of the episodes `done` names (stored or refused) settled; empty the file once none
        is pending."""
        if not done or not self.path.exists():
            return
        with self._locked() as fh:
            _line_start(fh)
            fh.write("".join(json.dumps({"settled": uuid, "outcome": how}) + "\n" for uuid, how in done.items()))
            fh.flush()
            if not _read(fh):
                fh.truncate(0)
            os.fsync(fh.fileno())

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield fh


def _line_start(fh: Any) -> None:
    """Move to the end of the file, on a line of its own: a line a crash cut short is closed first, or the next
    record would be joined to it and lost with it."""
    fh.seek(0)
    text = fh.read()
    if text and not text.endswith("\n"):
        fh.write("\n")


def _read(fh: Any) -> list[KeptEnd]:
    """The pending requests of the file: kept and not settled since."""
    fh.seek(0)
    kept: dict[str, KeptEnd] = {}
    for line in fh.read().splitlines():
        try:
            record = json.loads(line)
            if "settled" in record:
                kept.pop(str(record["settled"]), None)
            else:
                end = KeptEnd(**record)
                kept[end.episode_uuid] = end
        except (ValueError, TypeError):  # a line cut by a crash mid-write: the rest are whole
            logger.warning("a kept reward line could not be read and is skipped: %.80r", line)
    return list(kept.values())


def report(end: KeptEnd, outcome: Outcome, exc: Optional[BaseException]) -> None:
    """Say what became of a kept request sent again."""
    age = time.time() - end.kept_at
    if outcome == "stored":
        logger.info("the kept reward of episode %s is stored (kept %.0fs)", end.episode_uuid, age)
    elif outcome == "refused":
        logger.warning("the kept reward of episode %s was refused and is dropped: %s", end.episode_uuid, exc)

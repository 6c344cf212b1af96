"""Episodes: begin, end / abort / expire, and reading them (the rollout pool: `pool.py`; their calls:
`call_log.py`)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import sqlalchemy as sa

from ajet.errors import EpisodeConflict, NotReady, SwarmError, TrainerStopped, TrainerUnresponsive
from ajet.types import EpisodeStatus, ExperimentState
from ajet_core.records import carried
from ajet_store import counters, rows
from ajet_store import tables as t
from ajet_store.connect import DEFAULT_TRAINER_TIMEOUT_S
from ajet_store.db import Database, retried
from ajet_store.types import (
    BeginEpisode,
    CallRecord,
    EndEpisode,
    EpisodeChange,
    EpisodeRow,
    ExperimentRow,
)

_E = t.episodes.c
_INSERT_EPISODE = t.episodes.insert()
_END_EPISODE = (
    t.episodes.update()
    .where(_E.uuid == sa.bindparam("b_uuid"))
    .values(
        status=EpisodeStatus.ENDED.value,
        task_id=sa.bindparam("b_task_id"),
        reward=sa.bindparam("b_reward"),
        is_success=sa.bindparam("b_is_success"),
        metadata=sa.bindparam("b_metadata", type_=sa.JSON),
        ended_at=sa.bindparam("b_ended_at"),
    )
)
_MARK_UNTRAINABLE = (
    t.episodes.update()
    .where(_E.uuid == sa.bindparam("b_uuid"))
    .values(untrainable=True, untrainable_reason=sa.bindparam("b_reason"))
)
_CALL_NUMBERS = sa.select(sa.func.count(sa.distinct(t.llm_calls.c.seq)), sa.func.max(t.llm_calls.c.seq)).where(
    t.llm_calls.c.episode_uuid == sa.bindparam("b_uuid")
)

TRAINER_TIMEOUT_S = DEFAULT_TRAINER_TIMEOUT_S
"""The shipped `trainer_timeout_s`: a trainer silent for longer than this is taken for dead (a store's own is
`Store.trainer_timeout_s`)."""


def trainer_silence(exp: ExperimentRow, now: float, timeout_s: float) -> Optional[float]:
    """The trainer's heartbeat age where it makes begins wait (ROLLING, older than `timeout_s`), else None (a store
    no trainer ever beat in is not checked)."""
    if exp.state != ExperimentState.ROLLING or exp.trainer_heartbeat is None:
        return None
    age = now - exp.trainer_heartbeat
    return age if age > timeout_s else None


def refuse_if_silent(exp: ExperimentRow, now: float, timeout_s: float, also: str = "") -> None:
    """`TrainerStopped` when the trainer stopped cleanly, `TrainerUnresponsive` when `trainer_silence` says it is
    silent (`also`: what else the caller saw)."""
    if exp.trainer_stopped_at is not None:
        raise TrainerStopped(
            f"the trainer stopped {max(0.0, now - exp.trainer_stopped_at):.0f}s ago (it exited: SIGTERM, Ctrl-C, or "
            "an error it logged); start it again (ajet-trainer start, or ajet-swarm start) for episodes to begin",
            state=exp.state.value,
        )
    silent = trainer_silence(exp, now, timeout_s)
    if silent is not None:
        raise TrainerUnresponsive(
            f"no trainer heartbeat for {silent:.0f}s{also}: the trainer is down or restarting",
            state=exp.state.value,
            silent_s=silent,
        )


class EpisodeOps(Database):
    """Episode life cycle and reads."""

    # ------------------------------------------------------------------ life cycle
    @retried
    def begin_episode(
        self,
        uuid: str,
        key_hash: str,
        client_id: str,
        episode_type: str,
        timeout_s: float,
        mission: Optional[str] = None,
    ) -> EpisodeRow:
        """Insert an open episode; only while ROLLING with a live trainer (else `NotReady`)."""
        now, tally = time.time(), _Tally()
        with self._tx() as c:
            row = _begin(
                c,
                rows.shared_experiment(c),
                now,
                BeginEpisode(uuid, key_hash, client_id, episode_type, timeout_s, mission),
                tally,
                self.trainer_timeout_s,
            )
            tally.write(c, now)
            return row

    @retried
    def end_episode(
        self,
        uuid: str,
        client_id: str,
        task_id: str,
        reward: float,
        is_success: Optional[bool],
        metadata: dict[str, Any],
    ) -> tuple[EpisodeRow, bool]:
        """Record the reward; returns (row, changed). Ending again with the same result is harmless."""
        now, tally = time.time(), _Tally()
        with self._tx() as c:
            row, changed = _end(c, now, EndEpisode(uuid, client_id, task_id, reward, is_success, metadata), tally)
            tally.write(c, now)
            return row, changed

    @retried
    def apply_changes(self, changes: Sequence[EpisodeChange]) -> list[Union[EpisodeRow, SwarmError]]:
        """Begin and end episodes in one transaction (group commit), in order; returns each change's episode row,
        or in its place the domain error that refused it (`NotReady`, `EpisodeNotFound`, `EpisodeConflict`: each is
        raised before its change writes anything, so the others still commit). Any other error rolls back them all."""
        out: list[Union[EpisodeRow, SwarmError]] = []
        now = time.time()
        tally = _Tally()
        with self._tx() as c:
            exp: Optional[ExperimentRow] = None  # read once a transaction, as each single begin did
            for change in changes:
                try:
                    if isinstance(change, BeginEpisode):
                        exp = exp or rows.shared_experiment(c)  # held: no state change between check and commit
                        out.append(_begin(c, exp, now, change, tally, self.trainer_timeout_s))
                    else:
                        out.append(_end(c, now, change, tally)[0])
                except SwarmError as exc:
                    out.append(exc)
            tally.write(c, now)
        return out

    @retried
    def abort_episode(self, uuid: str, client_id: str) -> tuple[EpisodeRow, bool]:
        """Discard an open episode; returns (row, changed). Aborting an aborted or expired one is harmless."""
        now = time.time()
        with self._tx() as c:
            row = rows.episode(c, uuid)
            if row.status in (EpisodeStatus.ABORTED, EpisodeStatus.EXPIRED):
                return row, False
            if row.status == EpisodeStatus.ENDED:
                raise EpisodeConflict(f"episode {uuid} already ended; it cannot be aborted")
            if row.client_id != client_id:
                raise EpisodeConflict(f"episode {uuid} is held by client {row.client_id}, not {client_id}")
            c.execute(
                t.episodes.update()
                .where(t.episodes.c.uuid == uuid)
                .values(status=EpisodeStatus.ABORTED.value, ended_at=now)
            )
            counters.bump(
                c, counters.status_deltas(row.mission, row.episode_type, row.status.value, EpisodeStatus.ABORTED.value)
            )
            rows.touch_client(c, client_id, now, "aborted")
            return rows.episode(c, uuid), True

    @retried
    def expire_episodes(self, uuids: Optional[Iterable[str]] = None, idle_at: Optional[float] = None) -> list[str]:
        """Expire the given open episodes (all open ones when None); returns the uuids expired. With `idle_at`
        (a time), only those the store itself saw idle for their timeout by then (proxies sharing a store each
        see only their own calls)."""
        with self._tx() as c:
            q = sa.select(t.episodes.c.uuid).where(t.episodes.c.status == EpisodeStatus.OPEN.value)
            if uuids is not None:
                q = q.where(t.episodes.c.uuid.in_(list(uuids)))
            if idle_at is not None:
                q = q.where(t.episodes.c.last_active_at + t.episodes.c.timeout_s < idle_at)
            hit = [r[0] for r in c.execute(q)]
            if hit:
                moving = t.episodes.c.uuid.in_(hit)
                counters.bulk_move(c, moving, EpisodeStatus.EXPIRED.value)
                c.execute(
                    t.episodes.update().where(moving).values(status=EpisodeStatus.EXPIRED.value, ended_at=time.time())
                )
            return hit

    # ------------------------------------------------------------------ reads
    def open_uuids(self, trainable: bool = False) -> set[str]:
        """Uuids of the open episodes (`trainable`: only those a step could take, train episodes of the current
        run: the drain waits for these alone, so an eval episode left open never holds a step)."""
        with self._read() as c:
            q = sa.select(t.episodes.c.uuid).where(t.episodes.c.status == EpisodeStatus.OPEN.value)
            if trainable:
                run = sa.select(t.experiments.c.run_id).where(t.experiments.c.id == 1).scalar_subquery()
                q = q.where(t.episodes.c.episode_type == "train", t.episodes.c.run_id == run)
            return {r[0] for r in c.execute(q)}

    def count_episodes(self, uuids: Sequence[str]) -> int:
        """How many of `uuids` are episodes of this store."""
        with self._read() as c:
            return int(
                c.execute(
                    sa.select(sa.func.count()).select_from(t.episodes).where(t.episodes.c.uuid.in_(list(uuids)))
                ).scalar()
                or 0
            )

    def episode_by_key_hash(self, key_hash: str) -> Optional[EpisodeRow]:
        """The episode a key belongs to, whatever its status (None for a key no episode has)."""
        with self._read() as c:
            m = c.execute(sa.select(t.episodes).where(t.episodes.c.key_hash == key_hash)).mappings().first()
            return None if m is None else rows.episode_from(m)

    def get_episode(self, uuid: str) -> EpisodeRow:
        """One episode (`EpisodeNotFound` if unknown)."""
        with self._read() as c:
            return rows.episode(c, uuid)

    def episodes(self, status: Optional[EpisodeStatus] = None) -> list[EpisodeRow]:
        """Episodes, oldest first, optionally of one status (all in memory: see `iter_episodes`)."""
        return list(self.iter_episodes(status=status))

    def iter_episodes(
        self, status: Optional[EpisodeStatus] = None, since_step: Optional[int] = None, page: int = 500
    ) -> Iterator[EpisodeRow]:
        """All matching episodes, oldest first, read page by page (never the whole table at once).

        `since_step`: only episodes consumed at that step or later, or not consumed yet.
        """
        e = t.episodes.c
        q = sa.select(t.episodes)
        if status is not None:
            q = q.where(e.status == status.value)
        if since_step is not None:
            q = q.where(sa.or_(e.consumed_step >= since_step, e.consumed_step.is_(None)))
        return rows.episode_pages(self._read, q, page)


class _Tally:
    """The counter and per-client changes of a transaction's episode changes, written once at its end."""

    def __init__(self) -> None:
        self.deltas: list[dict[str, float]] = []
        self.clients: dict[tuple[str, str], int] = {}

    def add(self, deltas: dict[str, float], client_id: str, counter: str) -> None:
        self.deltas.append(deltas)
        self.clients[(client_id, counter)] = self.clients.get((client_id, counter), 0) + 1

    def write(self, c: sa.Connection, now: float) -> None:
        counters.bump(c, counters.merge(self.deltas))
        for (client_id, counter), n in sorted(self.clients.items()):  # the one order of client rows' locks
            rows.touch_client(c, client_id, now, counter, n)


def _admit(c: sa.Connection, exp: ExperimentRow) -> None:
    """`NotReady` (retry later) when the experiment has as many episodes open as its job's `max_open_episodes`."""
    cap = exp.job.max_open_episodes if exp.job is not None else None
    if cap is None:
        return
    open_now = int(counters.value(c, counters.episodes_key(EpisodeStatus.OPEN.value)))
    if open_now >= cap:
        raise NotReady(
            f"the experiment has {open_now} episodes open, its job's cap (max_open_episodes={cap}); retry when one "
            "ends",
            state=exp.state.value,
        )


def _begin(
    c: sa.Connection, exp: ExperimentRow, now: float, b: BeginEpisode, tally: _Tally, timeout_s: float
) -> EpisodeRow:
    """Insert an open episode in the caller's transaction (`NotReady`, before any write, unless ROLLING with a
    live trainer). A retried begin whose episode exists already is answered with it (`_rekey`)."""
    if b.retryable:
        known = rows.episode_or_none(c, b.uuid)
        if known is not None:
            return _rekey(c, known, b, now)
    if exp.state != ExperimentState.ROLLING:
        raise NotReady(f"episodes begin only in ROLLING; the experiment is {exp.state.value}", state=exp.state.value)
    refuse_if_silent(exp, now, timeout_s)
    _admit(c, exp)
    c.execute(
        _INSERT_EPISODE,
        {
            "uuid": b.uuid,
            "key_hash": b.key_hash,
            "client_id": b.client_id,
            "episode_type": b.episode_type,
            "mission": b.mission,
            "status": EpisodeStatus.OPEN.value,
            "created_at": now,
            "last_active_at": now,
            "timeout_s": b.timeout_s,
            "policy_version_start": exp.policy_version,
            "run_id": exp.run_id,
            "untrainable": False,
            "num_calls": 0,
        },
    )
    tally.add(counters.status_deltas(b.mission, b.episode_type, None, EpisodeStatus.OPEN.value), b.client_id, "begun")
    return carried(
        EpisodeRow, b, status=EpisodeStatus.OPEN, created_at=now, last_active_at=now,
        policy_version_start=exp.policy_version,
    )  # fmt: skip


def _rekey(c: sa.Connection, row: EpisodeRow, b: BeginEpisode, now: float) -> EpisodeRow:
    """The retry of a begin whose answer the client lost: its episode, open and never called (the lost key was
    never used), now under the retry's key; `Conflict` if it was used or has closed since."""
    if row.client_id != b.client_id or row.status != EpisodeStatus.OPEN or row.num_calls or row.calls_reserved:
        raise EpisodeConflict(
            f"this begin_episode was answered already with episode {row.uuid}, which is {row.status.value} with "
            f"{row.num_calls} call(s); a retried begin gets its episode only while it is open and unused"
        )
    c.execute(t.episodes.update().where(t.episodes.c.uuid == row.uuid).values(key_hash=b.key_hash, last_active_at=now))
    return replace(row, key_hash=b.key_hash, last_active_at=now)


def _end(c: sa.Connection, now: float, e: EndEpisode, tally: _Tally) -> tuple[EpisodeRow, bool]:
    """Record an episode's reward in the caller's transaction; (row, changed): an episode already ended with this
    task and reward is returned unchanged. `NotFound` / `Conflict` are raised before any write."""
    row = rows.episode(c, e.uuid)
    if row.status == EpisodeStatus.ENDED:
        if row.task_id == e.task_id and row.reward == e.reward:
            return row, False
        raise EpisodeConflict(f"episode {e.uuid} already ended with reward {row.reward} for task {row.task_id}")
    if row.status != EpisodeStatus.OPEN:
        raise EpisodeConflict(f"episode {e.uuid} is {row.status.value}; it can no longer be ended")
    if row.client_id != e.client_id:
        raise EpisodeConflict(f"episode {e.uuid} is held by client {row.client_id}, not {e.client_id}")
    c.execute(
        _END_EPISODE,
        {
            "b_uuid": e.uuid,
            "b_task_id": e.task_id,
            "b_reward": e.reward,
            "b_is_success": e.is_success,
            "b_metadata": e.metadata,
            "b_ended_at": now,
        },
    )
    deltas = counters.status_deltas(
        row.mission, row.episode_type, row.status.value, EpisodeStatus.ENDED.value, reward=e.reward
    )
    count, top = _call_numbers(c, e.uuid)
    why = None
    if top is None:  # no calls: recorded, never trained
        why = counters.NO_CALLS
        c.execute(_MARK_UNTRAINABLE, {"b_uuid": e.uuid, "b_reason": why})
        deltas[counters.WITHOUT_CALLS] = 1
    elif count != top + 1:  # a call numbered but never stored (its proxy died): the gap is closed, the episode trains
        closed = _close_gaps(c, e.uuid, top, now)
        deltas.update({counters.LOST_CALL: 1, "calls": closed, "call_errors": closed})
    tally.add(deltas, e.client_id, "ended")
    return replace(
        row,
        status=EpisodeStatus.ENDED,
        task_id=e.task_id,
        reward=e.reward,
        is_success=e.is_success,
        metadata=e.metadata,
        ended_at=now,
        untrainable=row.untrainable or why is not None,
        untrainable_reason=why if why is not None else row.untrainable_reason,
    ), True


def _call_numbers(c: sa.Connection, uuid: str) -> tuple[int, Optional[int]]:
    """(how many distinct call numbers an episode has stored, the highest of them or None)."""
    count, top = c.execute(_CALL_NUMBERS, {"b_uuid": uuid}).one()
    return int(count), top


def _close_gaps(c: sa.Connection, uuid: str, top: int, now: float) -> int:
    """Record each call number below `top` that no call was stored under as a call never answered (`NEVER_ANSWERED`,
    no ids). Its proxy died before the call's record was committed, so the agent never got its answer as an
    acknowledged one (an answer waits for its commit; a stream the agent read whole continues in a later call's
    messages, rendered as context there). Returns how many were closed."""
    lc = t.llm_calls.c
    stored = {s for (s,) in c.execute(sa.select(lc.seq).where(lc.episode_uuid == uuid))}
    missing = [seq for seq in range(top) if seq not in stored]
    records = [
        CallRecord(uuid, seq, "{}", None, None, None, None, None, 0, None, 0.0, now, error=counters.NEVER_ANSWERED)
        for seq in missing
    ]
    if records:
        c.execute(t.llm_calls.insert(), [rows.call_row(r) for r in records])
    return len(records)

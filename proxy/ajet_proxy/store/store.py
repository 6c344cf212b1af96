"""The store: the only module that writes SQL. Proxy and trainer share it.

SQLite (WAL) by default; any SQLAlchemy URL (PostgreSQL) through the same Core statements. Every
method is one transaction. On SQLite, write transactions start with `BEGIN IMMEDIATE` so two
processes never dead-lock upgrading a read lock; reads run on a separate autocommit engine.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import sqlalchemy as sa
from sqlalchemy import event

from ajet.types import BatchMode, EngineState, EpisodeStatus
from ajet_proxy.errors import EngineNotRolling, EpisodeConflict, EpisodeNotFound, StoreError, WrongState
from ajet_proxy.store import tables as t
from ajet_proxy.types import CallRecord, Deployment, EngineRow, EpisodeRow, PoolEpisode, StepRow

logger = logging.getLogger(__name__)

TRAINER_TIMEOUT_S = 30.0
"""A trainer silent for longer than this is taken for dead: no new episodes until it is back."""


def sqlite_url(path: str | Path) -> str:
    """A SQLAlchemy URL for a SQLite file."""
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def _make_engines(url: str) -> tuple[sa.Engine, sa.Engine]:
    if not url.startswith("sqlite"):
        eng = sa.create_engine(url, pool_pre_ping=True)
        return eng, eng
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)

    def build(immediate: bool) -> sa.Engine:
        eng = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(eng, "connect")
        def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
            cur.execute("PRAGMA busy_timeout=60000")
            cur.close()

        @event.listens_for(eng, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return eng

    return build(True), build(False)


class Store:
    """Engine state, episodes, LLM calls, deployments, clients and training steps."""

    def __init__(self, url: str):
        self.url = url
        self._w, self._r = _make_engines(url)
        t.metadata.create_all(self._w)
        self._init_rows()

    def close(self) -> None:
        """Dispose of the connection pools."""
        self._w.dispose()
        if self._r is not self._w:
            self._r.dispose()

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        with self._w.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._r.begin() as conn:
            yield conn

    def _init_rows(self) -> None:
        with self._tx() as c:
            version = c.execute(sa.select(t.meta.c.value).where(t.meta.c.key == "schema_version")).scalar()
            if version is None:
                c.execute(t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION)))
            elif int(version) != t.SCHEMA_VERSION:
                raise StoreError(f"store schema version {version}, this code needs {t.SCHEMA_VERSION}")
            if c.execute(sa.select(t.engine_state.c.id)).first() is None:
                c.execute(t.engine_state.insert().values(
                    id=1, state=EngineState.OFFLINE.value, state_since=time.time(), job=None, global_step=0,
                    policy_version=0, batch_mode=BatchMode.TASKS.value, deployments_version=0, run_id=0))

    # ------------------------------------------------------------------ engine state
    def engine_row(self) -> EngineRow:
        """The engine row."""
        with self._read() as c:
            return _engine(c)

    def transition(self, to: EngineState, allowed_from: Optional[Iterable[EngineState]] = None) -> EngineRow:
        """Move to `to` if the current state is in `allowed_from` (any state when None).

        Moving to OFFLINE aborts every open episode (their keys stop working).
        """
        with self._tx() as c:
            cur = _engine(c)
            if allowed_from is not None and cur.state not in set(allowed_from):
                raise WrongState(f"cannot go to {to.value} from {cur.state.value}", state=cur.state.value)
            now = time.time()
            if cur.state != to:
                c.execute(t.engine_state.update().values(state=to.value, state_since=now))
            if to == EngineState.OFFLINE:
                c.execute(t.episodes.update().where(t.episodes.c.status == EpisodeStatus.OPEN.value)
                          .values(status=EpisodeStatus.ABORTED.value, ended_at=now))
            return _engine(c)

    def heartbeat(self) -> None:
        """The trainer's sign of life (written every few seconds by the trainer daemon)."""
        with self._tx() as c:
            c.execute(t.engine_state.update().values(trainer_heartbeat=time.time()))

    def sync_job(self, job: dict[str, Any]) -> EngineRow:
        """Store the job (only while OFFLINE); its collection method becomes the batch mode.

        A job that differs from the stored one starts a new run: episodes rewarded under the old job
        stay in the store but leave the rollout pool. Re-syncing the same job keeps the pool (resume).
        """
        with self._tx() as c:
            cur = _engine(c)
            if cur.state != EngineState.OFFLINE:
                raise WrongState(f"config sync only in OFFLINE; engine is {cur.state.value}", state=cur.state.value)
            _write_job(c, cur, job)
            return _engine(c)

    def sync_and_start(self, job: dict[str, Any]) -> tuple[EngineRow, bool]:
        """Atomically: if OFFLINE, store the job and go BOOTING; else leave the running job alone.

        Returns (row, started). Two clients racing to start the same swarm cannot both sync.
        """
        with self._tx() as c:
            cur = _engine(c)
            if cur.state != EngineState.OFFLINE:
                return cur, False
            _write_job(c, cur, job)
            c.execute(t.engine_state.update().values(state=EngineState.BOOTING.value, state_since=time.time()))
            return _engine(c), True

    def set_batch_mode(self, mode: BatchMode) -> EngineRow:
        """Change the batch policy (applies to the next step)."""
        with self._tx() as c:
            c.execute(t.engine_state.update().values(batch_mode=mode.value))
            return _engine(c)

    # ------------------------------------------------------------------ deployments
    def register_deployment(self, dep: Deployment) -> None:
        """Add or replace a deployment; the proxy reloads its router."""
        with self._tx() as c:
            c.execute(t.deployments.delete().where(t.deployments.c.name == dep.name))
            c.execute(t.deployments.insert().values(name=dep.name, base_url=dep.base_url, model=dep.model,
                                                    policy_version=dep.policy_version, updated_at=time.time()))
            _bump_deployments(c)

    def remove_deployments(self, names: Optional[Iterable[str]] = None) -> None:
        """Remove the named deployments (all when None)."""
        with self._tx() as c:
            stmt = t.deployments.delete()
            if names is not None:
                stmt = stmt.where(t.deployments.c.name.in_(list(names)))
            c.execute(stmt)
            _bump_deployments(c)

    def deployments(self) -> list[Deployment]:
        """Registered deployments, by name."""
        with self._read() as c:
            rows = c.execute(sa.select(t.deployments).order_by(t.deployments.c.name)).mappings()
            return [Deployment(r["name"], r["base_url"], r["model"], r["policy_version"]) for r in rows]

    # ------------------------------------------------------------------ episodes
    def begin_episode(self, uuid: str, key_hash: str, client_id: str, episode_type: str, timeout_s: float,
                      mission: Optional[str] = None) -> EpisodeRow:
        """Insert an open episode; only while ROLLING (else `EngineNotRolling` naming the state)."""
        now = time.time()
        with self._tx() as c:
            eng = _engine(c)
            if eng.state != EngineState.ROLLING:
                raise EngineNotRolling(f"episodes begin only in ROLLING; engine is {eng.state.value}",
                                       state=eng.state.value)
            if eng.trainer_heartbeat is not None and now - eng.trainer_heartbeat > TRAINER_TIMEOUT_S:
                raise EngineNotRolling(f"no trainer heartbeat for {now - eng.trainer_heartbeat:.0f}s: the trainer "
                                       "is down or restarting", state=eng.state.value)
            c.execute(t.episodes.insert().values(
                uuid=uuid, key_hash=key_hash, client_id=client_id, episode_type=episode_type, mission=mission,
                status=EpisodeStatus.OPEN.value, created_at=now, last_active_at=now, timeout_s=timeout_s,
                policy_version_start=eng.policy_version, run_id=eng.run_id, untrainable=False, num_calls=0))
            _touch_client(c, client_id, now, "begun")
            return _episode(c, uuid)

    def end_episode(self, uuid: str, client_id: str, task_id: str, reward: float, is_success: Optional[bool],
                    metadata: dict[str, Any]) -> tuple[EpisodeRow, bool]:
        """Record the reward; returns (row, changed). Ending again with the same result is harmless."""
        now = time.time()
        with self._tx() as c:
            row = _episode(c, uuid)
            if row.status == EpisodeStatus.ENDED:
                if row.task_id == task_id and row.reward == reward:
                    return row, False
                raise EpisodeConflict(f"episode {uuid} already ended with reward {row.reward} "
                                      f"for task {row.task_id}")
            if row.status != EpisodeStatus.OPEN:
                raise EpisodeConflict(f"episode {uuid} is {row.status.value}; it can no longer be ended")
            if row.client_id != client_id:
                raise EpisodeConflict(f"episode {uuid} is held by client {row.client_id}, not {client_id}")
            c.execute(t.episodes.update().where(t.episodes.c.uuid == uuid).values(
                status=EpisodeStatus.ENDED.value, task_id=task_id, reward=reward, is_success=is_success,
                metadata=metadata, ended_at=now))
            _touch_client(c, client_id, now, "ended")
            return _episode(c, uuid), True

    def abort_episode(self, uuid: str, client_id: str) -> tuple[EpisodeRow, bool]:
        """Discard an open episode; returns (row, changed). Aborting an aborted or expired one is harmless."""
        now = time.time()
        with self._tx() as c:
            row = _episode(c, uuid)
            if row.status in (EpisodeStatus.ABORTED, EpisodeStatus.EXPIRED):
                return row, False
            if row.status == EpisodeStatus.ENDED:
                raise EpisodeConflict(f"episode {uuid} already ended; it cannot be aborted")
            c.execute(t.episodes.update().where(t.episodes.c.uuid == uuid)
                      .values(status=EpisodeStatus.ABORTED.value, ended_at=now))
            _touch_client(c, client_id, now, "aborted")
            return _episode(c, uuid), True

    def expire_episodes(self, uuids: Optional[Iterable[str]] = None) -> list[str]:
        """Expire the given open episodes (all open ones when None); returns the uuids expired."""
        with self._tx() as c:
            q = sa.select(t.episodes.c.uuid).where(t.episodes.c.status == EpisodeStatus.OPEN.value)
            if uuids is not None:
                q = q.where(t.episodes.c.uuid.in_(list(uuids)))
            hit = [r[0] for r in c.execute(q)]
            if hit:
                c.execute(t.episodes.update().where(t.episodes.c.uuid.in_(hit))
                          .values(status=EpisodeStatus.EXPIRED.value, ended_at=time.time()))
            return hit

    def open_uuids(self) -> set[str]:
        """Uuids of the open episodes."""
        with self._read() as c:
            q = sa.select(t.episodes.c.uuid).where(t.episodes.c.status == EpisodeStatus.OPEN.value)
            return {r[0] for r in c.execute(q)}

    def get_episode(self, uuid: str) -> EpisodeRow:
        """One episode (`EpisodeNotFound` if unknown)."""
        with self._read() as c:
            return _episode(c, uuid)

    def episodes(self, status: Optional[EpisodeStatus] = None) -> list[EpisodeRow]:
        """Episodes, oldest first, optionally of one status (all in memory: see `iter_episodes`)."""
        return list(self.iter_episodes(status=status))

    def iter_episodes(self, status: Optional[EpisodeStatus] = None, since_step: Optional[int] = None,
                      page: int = 500) -> Iterator[EpisodeRow]:
        """All matching episodes, oldest first, read page by page (never the whole table at once).

        `since_step`: only episodes consumed at that step or later, or not consumed yet.
        """
        e = t.episodes.c
        after: Optional[tuple[float, str]] = None
        while True:
            q = sa.select(t.episodes).order_by(e.created_at, e.uuid).limit(page)
            if status is not None:
                q = q.where(e.status == status.value)
            if since_step is not None:
                q = q.where(sa.or_(e.consumed_step >= since_step, e.consumed_step.is_(None)))
            if after is not None:
                q = q.where(sa.or_(e.created_at > after[0], sa.and_(e.created_at == after[0], e.uuid > after[1])))
            with self._read() as c:
                rows = [_episode_from(m) for m in c.execute(q).mappings()]
            yield from rows
            if len(rows) < page:
                return
            after = (rows[-1].created_at, rows[-1].uuid)

    def pool_episodes(self) -> list[PoolEpisode]:
        """Ended, trainable, not yet consumed train episodes: the rollout pool."""
        e = t.episodes.c
        run = sa.select(t.engine_state.c.run_id).where(t.engine_state.c.id == 1).scalar_subquery()
        q = (sa.select(e.uuid, e.task_id, e.reward, e.ended_at)
             .where(e.status == EpisodeStatus.ENDED.value, e.episode_type == "train", e.run_id == run,
                    e.consumed_step.is_(None), e.untrainable.is_(False))
             .order_by(e.ended_at))
        with self._read() as c:
            return [PoolEpisode(r.uuid, r.task_id, r.reward, r.ended_at) for r in c.execute(q)]

    # ------------------------------------------------------------------ calls
    def write_calls(self, records: list[CallRecord]) -> None:
        """Insert a batch of calls; refresh each episode's activity and flag untrainable ones."""
        if not records:
            return
        rows = [{
            "episode_uuid": r.episode_uuid, "seq": r.seq, "request": r.request, "response": r.response,
            "prompt_ids": t.pack_ints(r.prompt_ids), "completion_ids": t.pack_ints(r.completion_ids),
            "logprobs": t.pack_floats(r.logprobs), "finish_reason": r.finish_reason,
            "policy_version": r.policy_version, "deployment": r.deployment, "latency_ms": r.latency_ms,
            "stream": r.stream, "error": r.error, "created_at": r.created_at} for r in records]
        per_episode: dict[str, list[CallRecord]] = {}
        for r in records:
            per_episode.setdefault(r.episode_uuid, []).append(r)
        e = t.episodes.c
        with self._tx() as c:
            c.execute(t.llm_calls.insert(), rows)
            for uuid, recs in per_episode.items():
                latest = max(r.created_at for r in recs)
                c.execute(t.episodes.update().where(e.uuid == uuid).values(
                    num_calls=e.num_calls + len(recs),
                    last_active_at=sa.case((e.last_active_at < latest, latest), else_=e.last_active_at)))
                bad = next((r for r in recs if r.error is None and not r.trainable), None)
                if bad is not None:
                    c.execute(t.episodes.update().where(e.uuid == uuid).values(
                        untrainable=True, untrainable_reason=f"call {bad.seq}: backend returned no token ids"))

    def calls(self, uuid: str) -> list[CallRecord]:
        """The calls of one episode, in order."""
        q = sa.select(t.llm_calls).where(t.llm_calls.c.episode_uuid == uuid).order_by(
            t.llm_calls.c.seq, t.llm_calls.c.id)
        with self._read() as c:
            return [_call_from(m) for m in c.execute(q).mappings()]

    # ------------------------------------------------------------------ steps
    def record_step(self, step: int, policy_version: int, episode_uuids: list[str], reward_mean: Optional[float],
                    metrics: dict[str, Any]) -> None:
        """Record a training step and mark its episodes consumed, atomically.

        Raises `StoreError` (and records nothing) if any episode was already consumed or is not ended.
        """
        e = t.episodes.c
        with self._tx() as c:
            if episode_uuids:
                res = c.execute(t.episodes.update().where(
                    e.uuid.in_(episode_uuids), e.consumed_step.is_(None), e.status == EpisodeStatus.ENDED.value,
                ).values(consumed_step=step))
                if res.rowcount != len(set(episode_uuids)):
                    raise StoreError(f"step {step}: {len(set(episode_uuids)) - res.rowcount} episode(s) were "
                                     "already consumed or not ended")
            c.execute(t.steps.insert().values(step=step, policy_version=policy_version,
                                              num_episodes=len(episode_uuids), reward_mean=reward_mean,
                                              metrics=metrics, finished_at=time.time()))
            c.execute(t.engine_state.update().values(global_step=step, policy_version=policy_version))

    def rollback_to_step(self, step: int, policy_version: int) -> list[str]:
        """Forget the steps after `step` (their weights were lost with a crashed trainer).

        The episodes those steps consumed return to the pool, so each rewarded episode is trained
        exactly once in the lineage of weights that survives. Returns the uuids released.
        """
        e = t.episodes.c
        with self._tx() as c:
            released = [r[0] for r in c.execute(sa.select(e.uuid).where(e.consumed_step > step))]
            if released:
                c.execute(t.episodes.update().where(e.consumed_step > step).values(consumed_step=None))
            c.execute(t.steps.delete().where(t.steps.c.step > step))
            c.execute(t.engine_state.update().values(global_step=step, policy_version=policy_version))
            return released

    def steps(self, last: Optional[int] = None) -> list[StepRow]:
        """Recorded steps, oldest first (the `last` newest when given)."""
        q = sa.select(t.steps).order_by(t.steps.c.step.desc())
        if last is not None:
            q = q.limit(last)
        with self._read() as c:
            rows = [StepRow(m["step"], m["policy_version"], m["num_episodes"], m["reward_mean"],
                            m["metrics"] or {}, m["finished_at"]) for m in c.execute(q).mappings()]
        return rows[::-1]

    # ------------------------------------------------------------------ stats
    def totals(self) -> dict[str, int]:
        """Episodes by status, plus `calls` and `call_errors`."""
        with self._read() as c:
            out = {s.value: 0 for s in EpisodeStatus}
            for status, n in c.execute(sa.select(t.episodes.c.status, sa.func.count()).group_by(t.episodes.c.status)):
                out[status] = n
            out["calls"] = c.execute(sa.select(sa.func.count()).select_from(t.llm_calls)).scalar() or 0
            out["call_errors"] = c.execute(sa.select(sa.func.count()).select_from(t.llm_calls)
                                           .where(t.llm_calls.c.error.is_not(None))).scalar() or 0
            return out

    def missions(self) -> list[dict[str, Any]]:
        """Per mission: episodes by status and the mean reward of ended train episodes."""
        e = t.episodes.c
        q = (sa.select(e.mission, e.status, sa.func.count(), sa.func.avg(e.reward))
             .where(e.episode_type == "train").group_by(e.mission, e.status))
        out: dict[str, dict[str, Any]] = {}
        with self._read() as c:
            for mission, status, n, avg in c.execute(q):
                m = out.setdefault(mission or "-", {"mission": mission or "-", "open": 0, "ended": 0, "aborted": 0,
                                                   "reward_mean": None})
                if status == EpisodeStatus.ENDED.value:
                    m["ended"], m["reward_mean"] = n, float(avg) if avg is not None else None
                elif status == EpisodeStatus.OPEN.value:
                    m["open"] = n
                else:
                    m["aborted"] += n
        return sorted(out.values(), key=lambda m: m["mission"])

    def clients(self) -> list[dict[str, Any]]:
        """Client rows, most recently seen first."""
        with self._read() as c:
            q = sa.select(t.clients).order_by(t.clients.c.last_seen.desc())
            return [dict(m) for m in c.execute(q).mappings()]


# ---------------------------------------------------------------------- row helpers
def _engine(c: sa.Connection) -> EngineRow:
    m = c.execute(sa.select(t.engine_state).where(t.engine_state.c.id == 1)).mappings().one()
    return EngineRow(EngineState(m["state"]), m["state_since"], m["job"], m["global_step"], m["policy_version"],
                     BatchMode(m["batch_mode"]), m["deployments_version"], m["run_id"], m["trainer_heartbeat"])


def _write_job(c: sa.Connection, cur: EngineRow, job: dict[str, Any]) -> None:
    mode = BatchMode(job.get("swarm_mode_sample_collection_method", BatchMode.TASKS.value))
    run_id = cur.run_id + (1 if cur.job != job else 0)
    c.execute(t.engine_state.update().values(job=job, batch_mode=mode.value, run_id=run_id))


def _bump_deployments(c: sa.Connection) -> None:
    col = t.engine_state.c.deployments_version
    c.execute(t.engine_state.update().values(deployments_version=col + 1))


def _episode(c: sa.Connection, uuid: str) -> EpisodeRow:
    m = c.execute(sa.select(t.episodes).where(t.episodes.c.uuid == uuid)).mappings().first()
    if m is None:
        raise EpisodeNotFound(f"no episode {uuid}")
    return _episode_from(m)


def _episode_from(m: Any) -> EpisodeRow:
    return EpisodeRow(
        uuid=m["uuid"], key_hash=m["key_hash"], client_id=m["client_id"], episode_type=m["episode_type"],
        status=EpisodeStatus(m["status"]), created_at=m["created_at"], last_active_at=m["last_active_at"],
        timeout_s=m["timeout_s"], policy_version_start=m["policy_version_start"], num_calls=m["num_calls"],
        task_id=m["task_id"], reward=m["reward"], is_success=m["is_success"], metadata=m["metadata"] or {},
        ended_at=m["ended_at"], consumed_step=m["consumed_step"], untrainable=bool(m["untrainable"]),
        untrainable_reason=m["untrainable_reason"], mission=m["mission"])


def _call_from(m: Any) -> CallRecord:
    return CallRecord(
        episode_uuid=m["episode_uuid"], seq=m["seq"], request=m["request"], response=m["response"],
        prompt_ids=t.unpack_ints(m["prompt_ids"]), completion_ids=t.unpack_ints(m["completion_ids"]),
        logprobs=t.unpack_floats(m["logprobs"]), finish_reason=m["finish_reason"],
        policy_version=m["policy_version"], deployment=m["deployment"], latency_ms=m["latency_ms"],
        created_at=m["created_at"], stream=bool(m["stream"]), error=m["error"])


def _touch_client(c: sa.Connection, client_id: str, now: float, counter: str) -> None:
    col = t.clients.c
    res = c.execute(t.clients.update().where(col.client_id == client_id)
                    .values(last_seen=now, **{counter: getattr(col, counter) + 1}))
    if res.rowcount == 0:
        counts = {"begun": 0, "ended": 0, "aborted": 0, counter: 1}
        c.execute(t.clients.insert().values(client_id=client_id, first_seen=now, last_seen=now, **counts))

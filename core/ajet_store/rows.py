"""Row <-> record conversion: what the store's tables hold, as the frozen types of `ajet_store.types`."""

from __future__ import annotations

import functools
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ajet.errors import EpisodeNotFound
from ajet.job import AgentJetJob
from ajet.stat_types import StepInfo
from ajet.template_verdict import TemplateVerdict
from ajet.types import BatchMode, EpisodeStatus, ExperimentState
from ajet_store import tables as t
from ajet_store.types import CallImage, CallRecord, EpisodeRow, ExperimentRow

# Statements of the episode life cycle, built once: building one (and its cache key) costs more than running it.
_EXPERIMENT = sa.select(t.experiments).where(t.experiments.c.id == 1)
_EPISODE = sa.select(t.episodes).where(t.episodes.c.uuid == sa.bindparam("b_uuid"))
_CLIENT_TOUCH = {
    counter: t.clients.update()
    .where(t.clients.c.client_id == sa.bindparam("b_id"))
    .values(
        last_seen=sa.bindparam("b_now"),
        **{counter: getattr(t.clients.c, counter) + sa.bindparam("b_n", type_=sa.Integer)},
    )
    for counter in ("begun", "ended", "aborted")
}


def locked_experiment(c: sa.Connection) -> ExperimentRow:
    """The experiment's row, read in the caller's write transaction and locked until it ends (`FOR UPDATE` on
    PostgreSQL, where proxies on several machines may change the state at once; SQLite's write transactions are
    already one at a time): a check-then-change of the state cannot interleave with another."""
    return experiment(c, _EXPERIMENT.with_for_update())


def shared_experiment(c: sa.Connection) -> ExperimentRow:
    """The experiment's row, read in the caller's write transaction and held against changes until it ends (`FOR
    SHARE` on PostgreSQL: begins do not wait for each other, a state change waits for them, and they for it). A
    begin checks ROLLING with it: a move to ROLLING_POST then commits after the begin, and the drain that follows
    sees the new episode open (it once missed it and moved to WEIGHT_SYNCING under the episode's first call)."""
    return experiment(c, _EXPERIMENT.with_for_update(read=True))


def experiment(c: sa.Connection, query: Optional[sa.Select[Any]] = None) -> ExperimentRow:
    """The experiment's row (the one with id 1), read in the caller's transaction."""
    m = c.execute(_EXPERIMENT if query is None else query).mappings().one()
    return ExperimentRow(
        ExperimentState(m["state"]),
        m["state_since"],
        None if m["job"] is None else AgentJetJob.from_stored(m["job"]),
        m["global_step"],
        m["policy_version"],
        BatchMode(m["batch_mode"]),
        m["engines_version"],
        m["run_id"],
        m["trainer_heartbeat"],
        m["last_error"],
        m["last_error_at"],
        m["update_failures"] or 0,
        m["updating_since"],
        None if m["template_verdict"] is None else TemplateVerdict.model_validate(m["template_verdict"]),
        m["trainer_host"],
        m["trainer_pid"],
        m["trainer_alone"],
        m["trainer_stopped_at"],
    )


def episode(c: sa.Connection, uuid: str) -> EpisodeRow:
    """One episode (`NotFound` if unknown)."""
    row = episode_or_none(c, uuid)
    if row is None:
        raise EpisodeNotFound(f"no episode {uuid}")
    return row


def episode_or_none(c: sa.Connection, uuid: str) -> Optional[EpisodeRow]:
    """One episode, or None if unknown."""
    m = c.execute(_EPISODE, {"b_uuid": uuid}).mappings().first()
    return None if m is None else episode_from(m)


def episode_from(m: Any) -> EpisodeRow:
    """An episodes-table mapping as an `EpisodeRow`."""
    return EpisodeRow(
        uuid=m["uuid"],
        key_hash=m["key_hash"],
        client_id=m["client_id"],
        episode_type=m["episode_type"],
        status=EpisodeStatus(m["status"]),
        created_at=m["created_at"],
        last_active_at=m["last_active_at"],
        timeout_s=m["timeout_s"],
        policy_version_start=m["policy_version_start"],
        num_calls=m["num_calls"],
        calls_reserved=m["calls_reserved"],
        task_id=m["task_id"],
        reward=m["reward"],
        is_success=m["is_success"],
        metadata=m["metadata"] or {},
        ended_at=m["ended_at"],
        consumed_step=m["consumed_step"],
        untrainable=bool(m["untrainable"]),
        untrainable_reason=m["untrainable_reason"],
        mission=m["mission"],
    )


def call_from(m: Any) -> CallRecord:
    """An llm_calls-table mapping as a `CallRecord` (token arrays unpacked)."""
    return CallRecord(
        episode_uuid=m["episode_uuid"],
        seq=m["seq"],
        request=m["request"],
        response=m["response"],
        prompt_ids=t.unpack_ints(m["prompt_ids"]),
        completion_ids=t.unpack_ints(m["completion_ids"]),
        logprobs=t.unpack_floats(m["logprobs"]),
        finish_reason=m["finish_reason"],
        policy_version=m["policy_version"],
        engine=m["engine"],
        latency_ms=m["latency_ms"],
        created_at=m["created_at"],
        stream=bool(m["stream"]),
        error=m["error"],
        token_history=m["token_history"],
        parent_seq=m["parent_seq"],
        response_id=m["response_id"],
        truncated=bool(m["truncated"]),
        client_gone=bool(m["client_gone"]),
        version_spans=[(int(a), int(b)) for a, b in m["version_spans"]] if m["version_spans"] else None,
        images=_call_images(m["images"]),
    )


def _call_images(value: Any) -> Optional[tuple[CallImage, ...]]:
    """The `images` JSON of a call as `CallImage`s (None for none)."""
    if not value:
        return None
    return tuple(CallImage(i["sha256"], tuple(i["grid"]) if i.get("grid") else None) for i in value)


def call_row(r: CallRecord) -> dict[str, Any]:
    """A `CallRecord` as an llm_calls row (token arrays packed)."""
    return {
        "episode_uuid": r.episode_uuid,
        "seq": r.seq,
        "request": r.request,
        "response": r.response,
        "prompt_ids": t.pack_ints(r.prompt_ids),
        "completion_ids": t.pack_ints(r.completion_ids),
        "logprobs": t.pack_floats(r.logprobs),
        "finish_reason": r.finish_reason,
        "policy_version": r.policy_version,
        "engine": r.engine,
        "latency_ms": r.latency_ms,
        "stream": r.stream,
        "error": r.error,
        "created_at": r.created_at,
        "token_history": r.token_history,
        "parent_seq": r.parent_seq,
        "response_id": r.response_id,
        "truncated": r.truncated,
        "client_gone": r.client_gone,
        "version_spans": [list(span) for span in r.version_spans] if r.version_spans else None,
        "images": [{"sha256": i.sha256, "grid": list(i.grid) if i.grid else None} for i in r.images]
        if r.images
        else None,
    }


def step_from(m: Any) -> StepInfo:
    """A train_steps-table mapping as the wire's `StepInfo` (the store's row and the SDK's answer are one record)."""
    return StepInfo.model_validate({**m, "metrics": m["metrics"] or {}})


def touch_client(c: sa.Connection, client_id: str, now: float, counter: str, n: int = 1) -> None:
    """Count `n` begun/ended/aborted episodes for a client (inserting the client on first sight)."""
    res = c.execute(_CLIENT_TOUCH[counter], {"b_id": client_id, "b_now": now, "b_n": n})
    if res.rowcount == 0:
        counts = {"begun": 0, "ended": 0, "aborted": 0, counter: n}
        row = {"client_id": client_id, "first_seen": now, "last_seen": now, **counts}
        insert_or_add(c, t.clients, "client_id", [row], add=(counter,), replace=("last_seen",))


def insert_or_add(
    c: sa.Connection,
    table: sa.Table,
    key: str,
    rows: Sequence[dict[str, Any]],
    add: Sequence[str] = (),
    replace: Sequence[str] = (),
) -> None:
    """Insert `rows` (one statement); where a row's `key` exists already (or another transaction inserts it
    meanwhile: two proxies seeing a new counter or client at once, on PostgreSQL), add its `add` columns to that
    row's and take its `replace` columns, instead of failing the transaction on the unique key."""
    c.execute(_upsert(c.dialect.name, table, key, tuple(add), tuple(replace)), list(rows))


@functools.lru_cache(maxsize=None)
def _upsert(dialect: str, table: sa.Table, key: str, add: tuple[str, ...], replace: tuple[str, ...]) -> Any:
    """The `INSERT ... ON CONFLICT (key) DO UPDATE` of `insert_or_add`, built once per dialect and shape."""
    if dialect == "postgresql":
        pg = postgresql.insert(table)
        return pg.on_conflict_do_update(index_elements=[key], set_=_changes(table, pg.excluded, add, replace))
    lite = sqlite.insert(table)
    return lite.on_conflict_do_update(index_elements=[key], set_=_changes(table, lite.excluded, add, replace))


def _changes(table: sa.Table, excluded: Any, add: tuple[str, ...], replace: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {col: table.c[col] + excluded[col] for col in add}
    out.update({col: excluded[col] for col in replace})
    return out


def episode_pages(
    read: Callable[[], ContextManager[sa.Connection]], query: sa.Select[Any], page: int
) -> Iterator[EpisodeRow]:
    """The episodes `query` selects, oldest first, read `page` at a time, each page in a short read transaction of
    `read` (keyset paging on (created_at, uuid): no row skipped or repeated, whatever is written between pages)."""
    e = t.episodes.c
    after: Optional[tuple[float, str]] = None
    while True:
        q = query.order_by(e.created_at, e.uuid).limit(page)
        if after is not None:
            q = q.where(sa.or_(e.created_at > after[0], sa.and_(e.created_at == after[0], e.uuid > after[1])))
        with read() as c:
            found = [episode_from(m) for m in c.execute(q).mappings()]
        yield from found
        if len(found) < page:
            return
        after = (found[-1].created_at, found[-1].uuid)

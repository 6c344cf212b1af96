"""The call log in the store: an episode's LLM calls written in batches (group commit), read back in order, and
where a restarted proxy numbers on."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Sequence, Union

import sqlalchemy as sa

from ajet.errors import EpisodeConflict, SwarmError
from ajet.types import EpisodeStatus
from ajet_store import counters, rows
from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.types import CallRecord, PoolEpisode

_E = t.episodes.c
_INSERT_CALLS = t.llm_calls.insert()
_TOUCH_EPISODE = (
    t.episodes.update()
    .where(_E.uuid == sa.bindparam("b_uuid"))
    .values(
        num_calls=_E.num_calls + sa.bindparam("b_n", type_=sa.Integer),
        last_active_at=sa.case(
            (_E.last_active_at < sa.bindparam("b_latest", type_=sa.Float), sa.bindparam("b_latest")),
            else_=_E.last_active_at,
        ),
    )
)
"""Built once (building a statement costs more than running it): an episode's calls counted, activity kept."""
_RESERVE = (
    t.episodes.update()
    .where(_E.uuid == sa.bindparam("b_uuid"), _E.status == EpisodeStatus.OPEN.value)
    .values(calls_reserved=_E.calls_reserved + 1, last_active_at=sa.bindparam("b_now", type_=sa.Float))
    .returning(_E.calls_reserved)
)


class CallOps(Database):
    """The LLM calls of episodes."""

    def next_seqs(self, uuids: Sequence[str]) -> dict[str, int]:
        """For each episode with calls: one past its highest call number (where numbering goes on)."""
        if not uuids:
            return {}
        lc = t.llm_calls.c
        q = (
            sa.select(lc.episode_uuid, sa.func.max(lc.seq))
            .where(lc.episode_uuid.in_(list(uuids)))
            .group_by(lc.episode_uuid)
        )
        with self._read() as c:
            return {uuid: top + 1 for uuid, top in c.execute(q)}

    @retried
    def reserve_calls(self, uuids: Sequence[str]) -> list[Union[int, SwarmError]]:
        """A call number for each of `uuids` (an episode may come more than once), in one transaction: its row's
        `calls_reserved` before the increment, so proxies that share a store never give two calls one number;
        `EpisodeConflict` in place of a number for an episode that is not open (ended, aborted or expired elsewhere)."""
        out: list[Union[int, SwarmError]] = [EpisodeConflict("unreserved")] * len(uuids)
        now = time.time()
        with self._tx() as c:
            # rows locked in uuid order, the one order of every transaction (stable: an episode's calls keep theirs)
            for i in sorted(range(len(uuids)), key=lambda i: uuids[i]):
                uuid = uuids[i]
                taken = c.execute(_RESERVE, {"b_uuid": uuid, "b_now": now}).scalar()
                out[i] = EpisodeConflict(f"episode {uuid} is not open") if taken is None else int(taken) - 1
        return out

    def response_call(self, uuid: str, response_id: str) -> Optional[CallRecord]:
        """The call of episode `uuid` that answered as Responses id `response_id` (None: no such call)."""
        lc = t.llm_calls.c
        q = sa.select(t.llm_calls).where(lc.response_id == response_id, lc.episode_uuid == uuid).limit(1)
        with self._read() as c:
            row = c.execute(q).mappings().first()
        return None if row is None else rows.call_from(row)

    @retried
    def write_calls(self, records: Sequence[CallRecord]) -> None:
        """Insert a batch of calls; refresh each episode's activity and flag untrainable ones."""
        if not records:
            return
        per_episode: dict[str, list[CallRecord]] = {}
        for r in sorted(records, key=lambda r: r.episode_uuid):  # episode rows are locked in uuid order
            per_episode.setdefault(r.episode_uuid, []).append(r)
        e = t.episodes.c
        with self._tx() as c:
            c.execute(_INSERT_CALLS, [rows.call_row(r) for r in records])
            counters.bump(c, {"calls": len(records), "call_errors": sum(r.error is not None for r in records)})
            c.execute(
                _TOUCH_EPISODE,
                [
                    {"b_uuid": uuid, "b_n": len(recs), "b_latest": max(r.created_at for r in recs)}
                    for uuid, recs in per_episode.items()
                ],
            )  # one statement, every episode
            for uuid, recs in per_episode.items():
                bad = next((r for r in recs if r.error is None and not r.trainable), None)
                if bad is not None:
                    c.execute(
                        t.episodes.update()
                        .where(e.uuid == uuid)
                        .values(untrainable=True, untrainable_reason=f"call {bad.seq}: engine returned no token ids")
                    )

    def calls(self, uuid: str) -> list[CallRecord]:
        """The calls of one episode, in order."""
        q = (
            sa.select(t.llm_calls)
            .where(t.llm_calls.c.episode_uuid == uuid)
            .order_by(t.llm_calls.c.seq, t.llm_calls.c.id)
        )
        with self._read() as c:
            return [rows.call_from(m) for m in c.execute(q).mappings()]

    def calls_numbered(self, uuid: str, seqs: Sequence[int]) -> list[CallRecord]:
        """The calls of episode `uuid` numbered `seqs` that the store has, in order (what a proxy that did not serve
        them reads to continue the episode's history)."""
        lc = t.llm_calls.c
        q = sa.select(t.llm_calls).where(lc.episode_uuid == uuid, lc.seq.in_(list(seqs))).order_by(lc.seq, lc.id)
        with self._read() as c:
            return [rows.call_from(m) for m in c.execute(q).mappings()]

    def rewarded_episodes(self, batch: Sequence[PoolEpisode]) -> list[PoolEpisode]:
        """The batch's episodes with their calls, in batch order: what sample assembly reads."""
        return [replace(p, calls=tuple(self.calls(p.uuid))) for p in batch]

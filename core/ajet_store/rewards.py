"""Reward versions: stored episodes re-scored by a reward function, each score kept beside the original.

Version 0 is the reward each client gave at `end_episode` (the episode's row, never overwritten). A re-scoring is
a version of its own, identified by its function, the hash of that function's source and its selection: begun
again with the same three it is the same version, and only episodes it has not scored yet are scored (so a
re-scoring killed midway resumes, and one run twice changes nothing). Scores are written page by page.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Iterator, Optional, Sequence

import sqlalchemy as sa

from ajet.rescore_types import EpisodeSelection
from ajet.types import EpisodeStatus
from ajet_store import rows
from ajet_store import tables as t
from ajet_store.best_of_group import Member
from ajet_store.db import Database, retried
from ajet_store.errors import UnknownRewardVersion
from ajet_store.types import EpisodeReward, EpisodeRow, RewardVersion

ERROR_CHARS = 1000
"""How much of a function's error an episode's score keeps."""


def selection_key(selection: EpisodeSelection) -> str:
    """A stable digest of a selection (the identity of a reward version, with its function and source hash)."""
    return hashlib.sha256(json.dumps(selection.as_json(), sort_keys=True).encode()).hexdigest()


class RewardOps(Database):
    """Reward versions and the episodes' scores under them."""

    @retried
    def reward_version(self, function: str, source_hash: str, selection: EpisodeSelection) -> RewardVersion:
        """The reward version of this function, source and selection: the one begun before, or a new one."""
        key = selection_key(selection)
        v = t.reward_versions.c
        if selection.scored_in is not None:
            self.get_reward_version(selection.scored_in)
        with self._tx() as c:
            found = c.execute(
                sa.select(t.reward_versions).where(
                    v.function == function, v.source_hash == source_hash, v.selection_key == key
                )
            ).mappings().first()  # fmt: skip
            if found is None:
                last = c.execute(sa.select(sa.func.max(v.version))).scalar() or 0
                c.execute(
                    t.reward_versions.insert().values(
                        version=last + 1, function=function, source_hash=source_hash, selection=selection.as_json(),
                        selection_key=key, created_at=time.time(), scored=0, failed=0,
                    )
                )  # fmt: skip
                found = c.execute(sa.select(t.reward_versions).where(v.version == last + 1)).mappings().one()
            return _version_from(found)

    def get_reward_version(self, version: int) -> RewardVersion:
        """One reward version (`UnknownRewardVersion` if the store has none of that number)."""
        with self._read() as c:
            found = c.execute(
                sa.select(t.reward_versions).where(t.reward_versions.c.version == version)
            ).mappings().first()  # fmt: skip
        if found is None:
            raise UnknownRewardVersion(f"this store has no reward version {version}")
        return _version_from(found)

    def reward_versions(self) -> list[RewardVersion]:
        """Every reward version, oldest first."""
        with self._read() as c:
            found = c.execute(sa.select(t.reward_versions).order_by(t.reward_versions.c.version)).mappings()
            return [_version_from(m) for m in found]

    def unscored(self, version: RewardVersion, page: int = 256) -> Iterator[EpisodeRow]:
        """The episodes of the version's selection it has not scored yet, oldest first, page by page."""
        selection = EpisodeSelection.model_validate(version.selection)
        e, r = t.episodes.c, t.episode_rewards.c
        done = sa.select(r.episode_uuid).where(r.version == version.version, r.episode_uuid == e.uuid)
        return rows.episode_pages(self._read, _selected(selection).where(~sa.exists(done)), page)

    def known_episodes(self, uuids: Sequence[str]) -> set[str]:
        """Which of `uuids` are episodes of this store."""
        with self._read() as c:
            return set(c.execute(sa.select(t.episodes.c.uuid).where(t.episodes.c.uuid.in_(list(uuids)))).scalars())

    @retried
    def write_rewards(self, version: int, scores: Sequence[EpisodeReward]) -> None:
        """Store a page of scores of `version` (an episode scored already keeps its first score)."""
        r = t.episode_rewards.c
        now = time.time()
        with self._tx() as c:
            have = set(
                c.execute(
                    sa.select(r.episode_uuid).where(
                        r.version == version, r.episode_uuid.in_([s.episode_uuid for s in scores])
                    )
                ).scalars()
            )
            new = [s for s in scores if s.episode_uuid not in have]
            if new:
                c.execute(t.episode_rewards.insert(), [_score_values(s, version, now) for s in new])

    @retried
    def finish_reward_version(self, version: int) -> RewardVersion:
        """Count the version's scores and mark it finished."""
        r = t.episode_rewards.c
        with self._tx() as c:
            scored, failed = c.execute(
                sa.select(
                    sa.func.count().filter(r.error.is_(None)), sa.func.count().filter(r.error.is_not(None))
                ).where(r.version == version)
            ).one()
            c.execute(
                t.reward_versions.update()
                .where(t.reward_versions.c.version == version)
                .values(scored=scored, failed=failed, finished_at=time.time())
            )
        return self.get_reward_version(version)

    def episode_rewards(self, uuid: str) -> list[EpisodeReward]:
        """An episode's rewards: version 0 (its client's), then every reward version that scored it."""
        r = t.episode_rewards.c
        with self._read() as c:
            row = rows.episode(c, uuid)
            found = c.execute(
                sa.select(t.episode_rewards).where(r.episode_uuid == uuid).order_by(r.version)
            ).mappings()  # fmt: skip
            later = [EpisodeReward(uuid, m["version"], m["reward"], m["is_success"], m["error"]) for m in found]
        return [EpisodeReward(uuid, 0, row.reward, row.is_success), *later]

    def rewarded_groups(self, selection: EpisodeSelection, version: int = 0) -> Iterator[list[Member]]:
        """The selection's groups (a task's episodes one step trained; not yet trained ones by task), each with
        its episodes' rewards under `version` (0: the clients'; an episode that version did not score, or scored
        with an error, is left out), one group read at a time, in order of step and task."""
        if version:
            self.get_reward_version(version)
        e = t.episodes.c
        keys = _selected(selection).with_only_columns(e.consumed_step, e.task_id).distinct()
        with self._read() as c:
            groups = [(m[0], m[1]) for m in c.execute(keys.order_by(e.consumed_step, e.task_id))]
        for step, task in groups:
            found = self._group(selection, step, task, version)
            if found:
                yield found

    def _group(
        self, selection: EpisodeSelection, step: Optional[int], task: Optional[str], version: int
    ) -> list[Member]:
        e, r = t.episodes.c, t.episode_rewards.c
        q = _selected(selection).where(e.consumed_step.is_(None) if step is None else e.consumed_step == step)
        q = q.where(e.task_id.is_(None) if task is None else e.task_id == task)
        if version:
            q = q.join(t.episode_rewards, sa.and_(r.episode_uuid == e.uuid, r.version == version))
            q = q.where(r.error.is_(None), r.reward.is_not(None)).with_only_columns(e.uuid, r.reward)
        else:
            q = q.where(e.reward.is_not(None)).with_only_columns(e.uuid, e.reward)
        with self._read() as c:
            return [Member(m[0], float(m[1])) for m in c.execute(q.order_by(e.uuid))]


def _selected(s: EpisodeSelection) -> sa.Select:
    """The ended episodes of a selection (a query to add order and paging to)."""
    e = t.episodes.c
    q = sa.select(t.episodes).where(e.status == EpisodeStatus.ENDED.value, e.episode_type == s.episode_type)
    if s.first_step is not None:
        q = q.where(e.consumed_step >= s.first_step)
    if s.last_step is not None:
        q = q.where(e.consumed_step <= s.last_step)
    if s.task_id is not None:
        q = q.where(e.task_id == s.task_id)
    if s.mission is not None:
        q = q.where(e.mission == s.mission)
    if s.scored_in is not None:
        r = t.episode_rewards.c
        ok = sa.select(r.episode_uuid).where(r.version == s.scored_in, r.episode_uuid == e.uuid, r.error.is_(None))
        q = q.where(sa.exists(ok))
    return q


def _score_values(s: EpisodeReward, version: int, now: float) -> dict[str, object]:
    error = None if s.error is None else s.error[:ERROR_CHARS]
    return {"episode_uuid": s.episode_uuid, "version": version, "reward": s.reward, "is_success": s.is_success,
            "error": error, "scored_at": now}  # fmt: skip


def _version_from(m: sa.RowMapping) -> RewardVersion:
    return RewardVersion(
        version=m["version"], function=m["function"], source_hash=m["source_hash"], selection=dict(m["selection"]),
        created_at=m["created_at"], finished_at=m["finished_at"], scored=m["scored"], failed=m["failed"],
    )  # fmt: skip

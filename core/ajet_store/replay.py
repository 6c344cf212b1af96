"""Stored episodes copied into a replay experiment's store, to train again (`AgentJetJob.replay`).

The source's groups (a task's episodes one step trained) are copied one whole group at a time, in the order the
source trained them, so the replay's pool forms the same groups. Each copy keeps the source's calls as they were
logged (exact prompt and completion ids, the sampling log-probs: no re-tokenization), stamped policy version 0 of
the replay experiment, and ends with its reward under the chosen reward version; its metadata names its source
(`replay`: experiment, episode, reward version, step). A copy's uuid is derived from its source's and the version,
so an import killed midway resumes where it was, and one run twice copies nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Iterator, Literal, Optional

from ajet.rescore_types import EpisodeSelection
from ajet_store.best_of_group import Member, best_episode, preference_pair
from ajet_store.store import Store

REPLAY_CLIENT = "replay"
"""The client id the copies are begun and ended under."""
LINEAGE = "replay"
"""The metadata key that names a copy's source."""
OPEN_S = 3600.0
"""How long a copy may stay open (it is begun and ended at once)."""


def replay_uuid(version: int, source_uuid: str) -> str:
    """The uuid of the copy of `source_uuid` under reward version `version` (the same every time)."""
    return "rp-" + hashlib.sha256(f"{version}:{source_uuid}".encode()).hexdigest()[:32]


@dataclass
class ReplayImport:
    """Copies a source's selected episodes into `target`, a page of groups at a time (`step`)."""

    source: Store
    target: Store
    source_name: str
    """The source experiment's name (lineage)."""
    selection: EpisodeSelection
    version: int
    mission: Optional[str] = None
    """The mission the copies are labelled with (None: each keeps its source's)."""
    pick: Literal["all", "best", "pair"] = "all"
    """Which episodes of each group are copied: all of them (GRPO), its best (supervised fine-tuning:
    `best_of_group.best_episode`), or its preference pair (DPO: `best_of_group.preference_pair`)."""
    min_reward: Optional[float] = None
    """`best`: the best counts from this reward (None: when it beat its group's mean)."""
    margin: float = 0.0
    """`pair`: the least reward gap of a pair."""
    copied: int = 0
    """Episodes copied by this import (not those an earlier, killed one copied)."""
    without_calls: int = 0
    """Selected episodes with no trainable call (never trained: not copied)."""
    done: bool = False
    """Every selected group is in the target."""
    _groups: Optional[Iterator[list[Member]]] = None

    def step(self, max_episodes: int) -> int:
        """Copy whole groups until at least `max_episodes` episodes were looked at or none is left; returns how many
        were copied now."""
        if self._groups is None:
            self._groups = self.source.rewarded_groups(self.selection, self.version)
        before, seen = self.copied, 0
        while seen < max_episodes:
            group = next(self._groups, None)
            if group is None:
                self.done = True
                break
            seen += len(group)
            self._copy_group(group)
        return self.copied - before

    def _copy_group(self, group: list[Member]) -> None:
        if self.pick == "best":
            best = best_episode(group, self.min_reward)
            group = [best] if best is not None else []
        elif self.pick == "pair":
            pair = preference_pair(group, self.margin)
            group = list(pair) if pair is not None else []
        ids = {replay_uuid(self.version, m.uuid): m for m in group}
        present = self.target.known_episodes(list(ids))
        for uuid, member in ids.items():
            if uuid not in present:
                self._copy(uuid, member)

    def _copy(self, uuid: str, member: Member) -> None:
        row = self.source.get_episode(member.uuid)
        calls = [c for c in self.source.calls(member.uuid) if c.trainable]
        if not calls:
            self.without_calls += 1
            return
        key_hash = hashlib.sha256(f"replay-key:{uuid}".encode()).hexdigest()  # no key opens it: none was handed out
        mission = self.mission or row.mission
        self.target.begin_episode(uuid, key_hash, REPLAY_CLIENT, "train", OPEN_S, mission=mission)
        self.target.write_calls([replace(c, episode_uuid=uuid, policy_version=0, version_spans=None) for c in calls])
        lineage = {"experiment": self.source_name, "episode": member.uuid, "reward_version": self.version,
                   "step": row.consumed_step}  # fmt: skip
        metadata = {**(row.metadata or {}), LINEAGE: lineage}
        success = row.is_success if self.version == 0 else None  # a re-scoring's own flag is not carried
        self.target.end_episode(uuid, REPLAY_CLIENT, row.task_id or "", member.reward, success, metadata)
        self.copied += 1

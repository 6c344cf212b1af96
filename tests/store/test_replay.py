"""A replay's import: a source's groups copied whole, in order, with their exact ids and the chosen reward version's
rewards, each naming its source; resumable after a kill, and a second run copies nothing."""

from __future__ import annotations

import pytest

from ajet_proxy.rescore import rescore
from ajet_store import EpisodeSelection, Store, sqlite_url
from ajet_store.replay import LINEAGE, ReplayImport, replay_uuid
from tests.support import rewards_fixed
from tests.support.stored_episodes import fill_sums, rolling


@pytest.fixture()
def stores(tmp_path):
    source, target = Store(sqlite_url(tmp_path / "src.db")), Store(sqlite_url(tmp_path / "dst.db"))
    right = fill_sums(source, 8)
    version = rescore(source, rewards_fixed.right_sum, "tests.support.rewards_fixed:right_sum", EpisodeSelection())
    rolling(target)
    target.heartbeat()
    yield source, target, right, version.version
    source.close()
    target.close()


def test_the_copies_keep_the_ids_and_take_the_versions_rewards(stores):
    source, target, right, version = stores
    work = ReplayImport(source, target, "rescore/sums", EpisodeSelection(), version)
    work.step(1000)
    assert work.done and work.copied == 8 and work.without_calls == 0
    for uuid, was_right in right.items():
        copy = target.get_episode(replay_uuid(version, uuid))
        assert copy.reward == (1.0 if was_right else 0.0) and copy.status.value == "ended"  # the fixed reward
        assert copy.metadata[LINEAGE] == {"experiment": "rescore/sums", "episode": uuid, "reward_version": version,
                                          "step": None}  # fmt: skip
        got, kept = target.calls(copy.uuid), source.calls(uuid)
        assert [(c.prompt_ids, c.completion_ids, c.logprobs) for c in got] == [
            (c.prompt_ids, c.completion_ids, c.logprobs) for c in kept
        ]  # the exact ids and sampling log-probs: nothing re-tokenized
        assert {c.policy_version for c in got} == {0}
    pool = sorted(target.pool_episodes(), key=lambda p: p.ended_at)
    tasks = [p.task_id for p in pool]
    assert tasks == sorted(tasks) and len(pool) == 8  # a group's episodes follow each other, in the source's order


def test_an_import_killed_midway_resumes_and_a_rerun_copies_nothing(stores):
    source, target, _right, version = stores
    first = ReplayImport(source, target, "rescore/sums", EpisodeSelection(), version)
    assert first.step(2) == 2 and not first.done  # one group of two, then killed
    again = ReplayImport(source, target, "rescore/sums", EpisodeSelection(), version)
    again.step(1000)
    assert again.copied == 6 and len(target.pool_episodes()) == 8
    once_more = ReplayImport(source, target, "rescore/sums", EpisodeSelection(), version)
    once_more.step(1000)
    assert once_more.done and once_more.copied == 0


def test_a_selection_and_the_clients_version_copy_what_they_name(stores):
    source, target, _right, _version = stores
    work = ReplayImport(source, target, "rescore/sums", EpisodeSelection(task_id="sum-2"), 0)
    work.step(1000)
    assert work.copied == 2 and {p.task_id for p in target.pool_episodes()} == {"sum-2"}
    assert {p.reward for p in target.pool_episodes()} == {1.0}  # the client's (buggy) reward

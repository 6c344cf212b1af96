"""Reward versions in the store (`ajet_store.rewards`), on SQLite and PostgreSQL: a version is found again by its
function, source and selection; scores sit beside the original reward, each written once; the unscored pages skip
what was scored; the selection's filters."""

from __future__ import annotations

from typing import Iterator

import pytest

from ajet_store import EpisodeReward, EpisodeSelection, Store, UnknownRewardVersion, sqlite_url
from tests.support import postgres
from tests.support.require import require_postgres
from tests.support.stored_episodes import fill_sums


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    require_postgres()
    with postgres.postgres_url() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "s.db")
    else:
        url = postgres.fresh_database(request.getfixturevalue("pg_server"), f"rewards_{tmp_path.name[-8:].lower()}")
    st = Store(url)
    yield st
    st.close()


def test_a_version_is_found_again_by_its_function_source_and_selection(store: Store):
    first = store.reward_version("m:f", "h1", EpisodeSelection())
    assert first.version == 1 and first.finished_at is None and first.selection == {"episode_type": "train"}
    assert store.reward_version("m:f", "h1", EpisodeSelection()).version == 1
    assert store.reward_version("m:f", "h2", EpisodeSelection()).version == 2  # same name, other code
    assert store.reward_version("m:f", "h1", EpisodeSelection(task_id="t")).version == 3
    assert [v.version for v in store.reward_versions()] == [1, 2, 3]
    with pytest.raises(UnknownRewardVersion):
        store.reward_version("m:f", "h1", EpisodeSelection(scored_in=9))


def test_scores_sit_beside_the_original_each_written_once_and_counted_when_finished(store: Store):
    fill_sums(store, 6)
    v = store.reward_version("m:f", "h", EpisodeSelection())
    todo = list(store.unscored(v, page=4))
    assert [r.uuid for r in todo] == [f"ep-{i:03d}" for i in range(6)]
    store.write_rewards(1, [EpisodeReward(r.uuid, 1, 0.0) for r in todo[:3]])
    store.write_rewards(1, [EpisodeReward(todo[0].uuid, 1, 9.0), EpisodeReward(todo[3].uuid, 1, None, error="x")])
    assert [r.uuid for r in store.unscored(v, page=1)] == ["ep-004", "ep-005"]  # paged past the scored ones
    done = store.finish_reward_version(1)
    assert (done.scored, done.failed) == (3, 1) and done.finished_at is not None
    assert store.episode_rewards("ep-000") == [EpisodeReward("ep-000", 0, 1.0), EpisodeReward("ep-000", 1, 0.0)]
    assert store.get_episode("ep-000").reward == 1.0  # the client's reward is never written over
    assert store.episode_rewards("ep-003")[1].error == "x"


def test_a_selection_takes_steps_tasks_missions_and_what_an_earlier_version_scored(store: Store):
    fill_sums(store, 6)
    store.record_step(1, 1, ["ep-000", "ep-001"], 1.0, {})
    store.record_step(2, 2, ["ep-002", "ep-003"], 1.0, {})

    def picked(**kw: object) -> list[str]:
        v = store.reward_version("m:f", "h", EpisodeSelection(**kw))
        return [r.uuid for r in store.unscored(v)]

    assert picked(first_step=2) == ["ep-002", "ep-003"] and picked(last_step=1) == ["ep-000", "ep-001"]
    assert picked(first_step=1, last_step=2) == ["ep-000", "ep-001", "ep-002", "ep-003"]
    assert picked(task_id="sum-2") == ["ep-004", "ep-005"] and picked(mission="other") == []
    assert picked(episode_type="eval") == []
    earlier = store.reward_version("m:g", "h", EpisodeSelection())
    store.write_rewards(earlier.version, [EpisodeReward("ep-001", earlier.version, 1.0),
                                          EpisodeReward("ep-002", earlier.version, None, error="raised")])  # fmt: skip
    assert picked(scored_in=earlier.version) == ["ep-001"]

"""A group's best episode and its preference pair: pure choices over rewards, ties to the earlier uuid."""

from ajet_store.best_of_group import Member, best_episode, preference_pair


def group(*rewards: float) -> list[Member]:
    return [Member(f"e{i}", r) for i, r in enumerate(rewards)]


def test_the_best_is_the_one_that_beat_its_group():
    assert best_episode(group(0.0, 1.0, 0.5)) == Member("e1", 1.0)
    assert best_episode(group(1.0, 1.0, 1.0)) is None  # all alike: nothing to learn from
    assert best_episode(group(1.0)) is None and best_episode([]) is None
    assert best_episode(group(0.0, 1.0, 1.0)) == Member("e1", 1.0)  # a tie: the earlier uuid


def test_a_floor_replaces_the_group_mean():
    assert best_episode(group(1.0, 1.0), min_reward=1.0) == Member("e0", 1.0)
    assert best_episode(group(0.2, 0.4), min_reward=0.5) is None
    assert best_episode(group(0.7), min_reward=0.5) == Member("e0", 0.7)


def test_a_pair_is_highest_against_lowest_a_margin_apart():
    assert preference_pair(group(0.5, 1.0, 0.0, 0.0), margin=0.5) == (Member("e1", 1.0), Member("e2", 0.0))
    assert preference_pair(group(0.6, 1.0), margin=0.5) is None  # 0.4 apart
    assert preference_pair(group(1.0, 1.0), margin=0.0) is None  # a margin of 0 still needs a difference
    assert preference_pair(group(1.0), margin=0.0) is None

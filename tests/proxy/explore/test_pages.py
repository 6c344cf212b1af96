"""The explorer's pages over a store written as proxy and trainer write it (tests/support/explore_store.py):
each page shows what the store holds, model text stays text, the token view splits trained from masked tokens
as the trainer does, and the swarm token guards every page."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from ajet_proxy.explore.advantages import group_advantages
from ajet_proxy.explore.serve import standalone_app
from ajet_proxy.rescore import rescore
from ajet_store import EpisodeSelection, Store, sqlite_url
from ajet_store.sequences import episode_sequences
from ajet_trainer.tiny_model import builtin_model_path
from tests.support import rewards_fixed
from tests.support.explore_store import HOSTILE_ANSWER, fill
from tests.support.stored_episodes import fill_sums

LOCAL = ("127.0.0.1", 50000)
"""The test client's address: without a token the explorer serves loopback clients only."""


@pytest.fixture(scope="module")
def explored(tmp_path_factory):
    st = Store(sqlite_url(tmp_path_factory.mktemp("explore") / "s.db"))
    filled = fill(st, "builtin:tiny")
    with TestClient(standalone_app(st, str(builtin_model_path("builtin:tiny"))), client=LOCAL) as client:
        yield client, st, filled
    st.close()


def test_the_runs_page_charts_every_step_and_lists_them(explored):
    client, st, _ = explored
    page = client.get("/explore/").text
    assert "explore / letters-run" in page
    charts = re.findall(r'<svg class="chart"[^>]*aria-label="([^"]+)" data-points="(\d+)"', page)
    assert dict(charts) == {"reward": "2", "entropy": "2", "KL to the reference": "2",
                            "engine-trainer log-prob gap": "2", "merge rate": "2", "step time (s)": "2"}  # fmt: skip
    shown = re.findall(r'<tr data-step="(\d+)">.*?<td class="reward">([^<]*)</td>', page, re.S)
    assert shown == [(str(s.step), f"{s.reward_mean:.4f}") for s in reversed(st.steps())]


def test_live_answers_the_newest_step(explored):
    client, _, _ = explored
    assert client.get("/explore/live").json() == {"step": 2, "state": "ROLLING"}


def test_a_step_lists_its_groups_with_their_mean_rewards(explored):
    client, _, filled = explored
    page = client.get("/explore/steps/1").text
    for task in ("task-a", "task-b"):
        rewards = [r for u, r in filled.rewards.items() if filled.tasks[u] == task and filled.steps[u] == 1]
        assert re.search(rf">{task}</a></td><td>2</td>\s*<td>{sum(rewards) / 2:.4f}</td>", page), page
    assert client.get("/explore/steps/9").status_code == 404


def test_episodes_filter_and_sort(explored):
    client, _, filled = explored
    page = client.get("/explore/episodes", params={"step": 2, "task": "task-a", "sort": "reward"}).text
    listed = re.findall(r'href="/explore/episodes/([^"]+)"', page)
    expected = sorted((u for u in filled.rewards if filled.steps[u] == 2 and filled.tasks[u] == "task-a"),
                      key=lambda u: (filled.rewards[u], u), reverse=True)  # fmt: skip
    assert listed == expected
    high = client.get("/explore/episodes", params={"min": 1.0}).text
    assert set(re.findall(r'href="/explore/episodes/([^"]+)"', high)) == {
        u for u, r in filled.rewards.items() if r >= 1
    }
    assert "none" in client.get("/explore/episodes", params={"client": "nobody"}).text


def test_a_group_shows_grpo_advantages_as_the_trainer_computes_them(explored):
    from ajet_trainer.grpo import episode_advantages
    from ajet_trainer.types import EpisodeSample

    client, _, filled = explored
    members = [u for u in filled.rewards if filled.steps[u] == 1 and filled.tasks[u] == "task-b"]
    page = client.get("/explore/groups/1/task-b").text
    shown = dict(re.findall(r'/explore/episodes/([^"]+)">.*?class="advantage[^"]*">([^<]+)</b>', page, re.S))
    trainer = episode_advantages([EpisodeSample(u, "task-b", filled.rewards[u], ()) for u in members])
    assert {u: float(a) for u, a in shown.items()} == pytest.approx({u: trainer[u] for u in members}, abs=1e-3)
    assert group_advantages([1.0]) == pytest.approx([1.0]) and group_advantages([0.5, 0.5]) == [0.0, 0.0]


def test_the_token_view_splits_trained_and_masked_as_the_trainer_does(explored):
    client, st, filled = explored
    page = client.get(f"/explore/episodes/{filled.two_calls}").text
    (section,) = re.findall(r'<section class="sequence" data-trained="(\d+)" data-masked="(\d+)">', page)
    (seq,), _, _ = episode_sequences(st.calls(filled.two_calls), filled.two_calls, "task-a")
    assert section == (str(sum(seq.response_mask)), str(len(seq.response_ids) - sum(seq.response_mask)))
    assert section == ("5", "3")  # 2 + 3 answer tokens, the 3 tool-result tokens between them
    assert page.count('class="tok masked"') == 3 and page.count('class="tok trained"') == 5
    assert 'title="logprob -0.1000 · token 20 · call 0 · policy v0"' in page


def test_model_text_is_shown_as_text(explored):
    client, _, filled = explored
    page = client.get(f"/explore/episodes/{filled.hostile}").text
    assert "<script>window.__pwned" not in page and "<img src=x" not in page and "<b>bold?</b>" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page and "&lt;img src=x onerror=" in page
    assert "\u241b[31mred\u241b[0m" in page and "\x1b" not in page  # the escape drawn, never sent
    assert HOSTILE_ANSWER.startswith("<script>")


def test_unknown_episode_and_bad_parameters_are_answered(explored):
    client, _, _ = explored
    assert client.get("/explore/episodes/nope").status_code == 404
    assert client.get("/explore/groups/1/nope").status_code == 404
    assert client.get("/explore/episodes", params={"step": "x", "min": "nan", "sort": "drop table"}).status_code == 200


def test_the_swarm_token_guards_every_page(tmp_path):
    st = Store(sqlite_url(tmp_path / "s.db"))
    fill(st, "builtin:tiny")
    with TestClient(standalone_app(st, None, token="s3cret")) as client:
        for path in ("/explore/", "/explore/live", "/explore/episodes", "/explore//episodes", "/explore/./live",
                     "/explore/static/explore.css", "/explore/episodes/s1-task-a-0"):  # fmt: skip
            r = client.get(path, follow_redirects=False)
            assert r.status_code == 401 and 'name="token"' in r.text, path
        assert client.get("/explore/live", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert client.post("/explore/login", data={"token": "wrong"}).status_code == 401
        assert client.get("/explore/live", cookies={"ajet_swarm_token": "wrong"}).status_code == 401
        r = client.post("/explore/login", data={"token": "s3cret"}, follow_redirects=False)
        assert r.status_code == 303 and "ajet_swarm_token" in r.headers["set-cookie"]
        assert client.get("/explore/live").json()["step"] == 2  # the cookie the form set
    st.close()


@pytest.mark.slow
def test_the_pages_read_a_postgresql_store_alike():
    """The same store written on PostgreSQL: each page answers and shows the same numbers."""
    from tests.support import postgres
    from tests.support.require import require_postgres

    require_postgres()
    with postgres.postgres_url() as server:
        st = Store(postgres.fresh_database(server, "ajet_explore"))
        filled = fill(st, "builtin:tiny")
        with TestClient(standalone_app(st, str(builtin_model_path("builtin:tiny"))), client=LOCAL) as client:
            live = client.get("/explore/live").json()
            page = client.get("/explore/episodes", params={"step": 1, "sort": "reward"}).text
            token_view = client.get(f"/explore/episodes/{filled.two_calls}").text
            group = client.get("/explore/groups/2/task-a")
        st.close()
    assert live == {"step": 2, "state": "ROLLING"}
    listed = re.findall(r'href="/explore/episodes/([^"]+)"', page)
    step_1 = [u for u in filled.rewards if filled.steps[u] == 1]
    assert listed == sorted(step_1, key=lambda u: (filled.rewards[u], u), reverse=True)  # reward, then uuid, down
    assert '<section class="sequence" data-trained="5" data-masked="3">' in token_view and group.status_code == 200


def test_reward_versions_show_beside_the_clients_and_list_where_they_differ(tmp_path):
    st = Store(sqlite_url(tmp_path / "s.db"))
    right = fill_sums(st, 6)
    rescore(st, rewards_fixed.right_sum, "tests.support.rewards_fixed:right_sum", EpisodeSelection())
    with TestClient(standalone_app(st, str(builtin_model_path("builtin:tiny"))), client=LOCAL) as client:
        page = client.get("/explore/rewards").text
        row = re.search(r'<tr data-version="1">(.*?)</tr>', page, re.S).group(1)
        assert "tests.support.rewards_fixed:right_sum" in row and "<td>6</td><td>0</td>" in row
        wrong = sorted(u for u, ok in right.items() if not ok)  # the client gave 1.0 to every episode
        assert re.search(rf'differs=1">{len(wrong)}</a>', row), row
        listed = client.get("/explore/episodes", params={"differs": 1, "sort": "oldest"}).text
        assert re.findall(r'href="/explore/episodes/([\w-]+)"', listed) == wrong
        episode = client.get(f"/explore/episodes/{wrong[0]}").text
        shown = re.findall(r'<tr data-version="(\d)">.*?<td class="reward">([^<]*)</td>', episode, re.S)
        assert shown == [("0", "1.0000"), ("1", "0.0000")] and "differs" in episode
        assert "none: no episode was re-scored" not in page
    st.close()


def test_every_experiment_has_its_pages_and_links_that_land(tmp_path):
    """Three experiments on one store: the runs page links each; an experiment's pages show its own episodes, every
    link on them lands in the same experiment (or on another's home); another's uuid, or an unknown experiment, is
    404; the monitor's link to the third's episode lands on it."""
    from ajet.types import ExperimentState, ExperimentStatus, SwarmExperiment
    from ajet_proxy.overwatch import Overwatch
    from ajet_store import experiment_store
    from ajet_store.placement import experiment_slug

    model = str(builtin_model_path("builtin:tiny"))
    first = Store(sqlite_url(tmp_path / "swarm.db"))
    fill(first, model)
    others = {name: experiment_store(first, f"explore/{name}") for name in ("b-run", "c-run")}
    for name, st in others.items():
        fill(st, model, name, prefix=name[0] + "-")
    third = experiment_slug("explore/c-run")
    try:
        with TestClient(standalone_app(first, model), client=LOCAL) as client:
            home = client.get("/explore/").text
            assert all(f'href="/explore/x/{experiment_slug("explore/" + n)}/"' in home for n in others)
            listing = client.get(f"/explore/x/{third}/episodes").text
            assert "c-s1-task-a-0" in listing and ">s1-task-a-0<" not in listing
            for page in (listing, client.get(f"/explore/x/{third}/episodes/c-s1-task-a-0").text):
                for link in re.findall(r'href="(/explore/[^"#]*)"', page):
                    assert link.startswith((f"/explore/x/{third}/", "/explore/static/")) or link.endswith("/"), link
                    assert client.get(link).status_code == 200, link
            assert client.get("/explore/episodes/c-s1-task-a-0").status_code == 404  # the default has no such one
            assert client.get("/explore/x/default/episodes").text.count("/explore/x/default/episodes/") > 0
            assert client.get("/explore/x/nobody_00000000/episodes").status_code == 404
            status = ExperimentStatus(state=ExperimentState.ROLLING, state_seconds=1.0, global_step=2, policy_version=2,
                                      job_synced=True)  # fmt: skip
            monitor = Overwatch("http://127.0.0.1:1", refresh=1.0)
            monitor.experiments = [
                SwarmExperiment(name="explore/letters-run", slug="default", default=True, status=status),
                SwarmExperiment(name="explore/c-run", slug=third, default=False, status=status),
            ]
            monitor.client.experiment = "explore/c-run"
            link = monitor._explorer_base().removeprefix("http://127.0.0.1:1") + "/episodes/c-s1-task-a-0"
            assert client.get(link).status_code == 200 and "c-s1-task-a-0" in client.get(link).text
    finally:
        for st in others.values():
            st.close()
        first.close()


def test_the_runs_page_charts_each_evaluated_task_set_beside_the_training_reward(tmp_path):
    from ajet.evaluation_types import Summary

    st = Store(sqlite_url(tmp_path / "e.db"))
    fill(st, "builtin:tiny")
    for version, (mean, at_k) in enumerate([(0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]):
        st.record_evaluation("held_out", 4, Summary(3, 12, mean, at_k), (version, version), [f"e{version}"])
    st.record_evaluation("held_out", 4, Summary(3, 12, 0.9, 0.9), (2, 3), ["mixed"])  # two policies: not charted
    with TestClient(standalone_app(st, str(builtin_model_path("builtin:tiny"))), client=LOCAL) as client:
        page = client.get("/explore/").text
    st.close()
    charts = re.findall(r'<svg class="chart"[^>]*aria-label="([^"]+)" data-points="(\d+)"', page)
    assert charts[:3] == [("reward", "2"), ("held_out: held-out reward", "3"), ("held_out: pass@4", "3")]
    assert "<title>step 2: 0.75</title>" in page

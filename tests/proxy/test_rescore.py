"""`ajet-proxy rescore` (issue 52): a reward function with a bug fixed, applied to stored episodes without running
one agent again. Each score is a new reward version beside the client's, which is never written over; a re-run
changes nothing; a function that raises marks its episode and goes on; a re-scoring SIGKILLed midway resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from ajet.errors import InvalidRequest
from ajet.rescore_types import EpisodeSelection
from ajet_store import Store, sqlite_url
from ajet_store import tables as t
from tests.support import rewards_fixed
from tests.support.in_process import proxy_in_process
from tests.support.stored_episodes import fill_sums

REPO = Path(__file__).resolve().parents[2]


def rescore(url: str, fn: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    reward = f"tests.support.rewards_fixed:{fn}"
    cmd = [sys.executable, "-m", "ajet_proxy.cli", "rescore", "--db", url, "--reward", reward]
    return subprocess.run([*cmd, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


def scored_at(url: str) -> dict[str, float]:
    eng = sa.create_engine(url)
    with eng.connect() as c:
        found = {r.episode_uuid: r.scored_at for r in c.execute(sa.select(t.episode_rewards))}
    eng.dispose()
    return found


def test_a_fixed_reward_is_a_version_beside_the_clients_and_a_rerun_changes_nothing(tmp_path: Path):
    url = sqlite_url(tmp_path / "s.db")
    with Store(url) as st:
        right = fill_sums(st, 8)
    res = rescore(url, "right_sum")
    assert res.returncode == 0, res.stderr
    last = res.stdout.splitlines()[-1]
    assert last == "reward version 1 (tests.support.rewards_fixed:right_sum): 8 episode(s) scored, 0 failed"
    with Store(url) as st:
        for uuid, ok in right.items():
            client, fixed = st.episode_rewards(uuid)
            assert (client.reward, fixed.reward, fixed.is_success) == (1.0, float(ok), ok)
            assert st.get_episode(uuid).reward == 1.0
    first = scored_at(url)
    again = rescore(url, "right_sum")
    assert again.returncode == 0 and "scored 0" not in again.stdout and again.stdout.count("\n") == 1, again.stdout
    assert "reward version 1 " in again.stdout and scored_at(url) == first  # nothing scored twice


def test_a_function_that_raises_marks_its_episode_and_goes_on(tmp_path: Path):
    url = sqlite_url(tmp_path / "s.db")
    with Store(url) as st:
        fill_sums(st, 6)
    res = rescore(url, "fails_on_odd", "--page", "2")
    assert res.returncode == 0 and res.stdout.splitlines()[-1].endswith("3 episode(s) scored, 3 failed"), res
    with Store(url) as st:
        assert st.episode_rewards("ep-001")[1].error == "ValueError: cannot score ep-001"
        assert st.episode_rewards("ep-002")[1].reward == 0.5


def test_a_rescoring_killed_midway_resumes_where_it_was(tmp_path: Path):
    url = sqlite_url(tmp_path / "s.db")
    with Store(url) as st:
        right = fill_sums(st, 12)
    flag = tmp_path / "killed"
    env = {"AJET_TEST_KILL_AT": "ep-006", "AJET_TEST_KILLED_FLAG": str(flag)}
    killed = rescore(url, "killed_midway", "--page", "4", env=env)
    assert killed.returncode == -signal.SIGKILL and flag.exists(), killed.stderr
    before = scored_at(url)
    assert sorted(before) == [f"ep-{i:03d}" for i in range(4)]  # its first page; the second died unwritten
    res = rescore(url, "killed_midway", "--page", "4")
    assert res.returncode == 0 and res.stdout.splitlines()[-1].startswith("reward version 1 "), res
    after = scored_at(url)
    assert sorted(after) == sorted(right) and {u: after[u] for u in before} == before
    with Store(url) as st:
        assert all(st.episode_rewards(u)[1].reward == float(ok) for u, ok in right.items())


def test_a_function_that_cannot_be_found_is_one_line(tmp_path: Path):
    url = sqlite_url(tmp_path / "s.db")
    Store(url).close()
    res = rescore(url, "absent")
    assert res.returncode == 1 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "has no function 'absent'" in res.stderr


def test_the_sdk_rescores_through_the_control_api_as_the_command_does(tmp_path: Path):
    """`SwarmClient.rescore`: the function runs in the client, the proxy hands out each unscored episode as the
    function sees it and stores the scores: the same version a re-run finds, nothing scored twice."""
    with proxy_in_process(tmp_path) as (client, store):
        right = fill_sums(store, 10)
        done = client.rescore(rewards_fixed.right_sum, page=3)
        assert (done.version, done.scored, done.failed) == (1, 10, 0) and done.finished_at is not None
        assert all(store.episode_rewards(u)[1].reward == float(ok) for u, ok in right.items())
        first = scored_at(store.url)
        assert client.rescore(rewards_fixed.right_sum).version == 1 and scored_at(store.url) == first
        only = client.rescore(rewards_fixed.fails_on_odd, EpisodeSelection(task_id="sum-1"))
        assert (only.version, only.scored, only.failed) == (2, 1, 1)  # sum-1 is episodes 2 and 3: 3 raises
        assert [(v.version, v.function) for v in client.get_reward_versions()] == [
            (1, "tests.support.rewards_fixed:right_sum"), (2, "tests.support.rewards_fixed:fails_on_odd")]  # fmt: skip


def test_scores_for_episodes_the_store_lacks_are_refused_naming_the_field(tmp_path: Path):
    with proxy_in_process(tmp_path) as (client, store):
        fill_sums(store, 2)
        v = client.rescore(rewards_fixed.right_sum)
        body = {"version": v.version, "scores": [{"episode_uuid": "ep-000", "reward": 1.0},
                                                  {"episode_uuid": "nope", "reward": 1.0}]}  # fmt: skip
        with pytest.raises(InvalidRequest) as err:
            client._run(client._call("POST", "write_scores", body))
        assert err.value.fields == ["scores.1.episode_uuid"]
        with pytest.raises(InvalidRequest):
            client._run(client._call("POST", "unscored_episodes", {"version": 7}))
        with pytest.raises(InvalidRequest):
            nan = {"version": v.version, "scores": [{"episode_uuid": "ep-000", "reward": "NaN"}]}
            client._run(client._call("POST", "write_scores", nan))

"""Export round-trips: what is exported equals what is stored; the inspection commands read the store."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_proxy.episode_export import PAGE, export_jsonl, export_parquet
from ajet_store import Store, sqlite_url
from ajet_store.types import CallRecord
from tests.support.procs import offline_env


@pytest.fixture
def filled(tmp_path):
    url = sqlite_url(tmp_path / "exp.db")
    st = Store(url)
    st.sync_job(AgentJetJob())
    st.transition(ExperimentState.ROLLING)
    n = PAGE + 7  # more than one page, so paging is exercised
    for i in range(n):
        uuid = f"ep{i:04d}"
        st.begin_episode(uuid, f"h{i}", "c", "train", 60)
        req = json.dumps({"messages": [{"role": "user", "content": f"q{i}"}]})
        resp = json.dumps({"choices": [{"message": {"content": f"a{i}"}}]})
        st.write_calls([CallRecord(uuid, 0, req, resp, [1, 2, i], [i, 7], [-0.5, -0.25], "stop", 3, "d", 1.0, 1.0)])
        if i % 3:
            st.end_episode(uuid, "c", f"t{i % 5}", float(i), None, {})
    st.record_step(1, 1, [f"ep{i:04d}" for i in range(1, 10) if i % 3], 0.5, {})
    yield st, url, tmp_path
    st.close()


def test_jsonl_round_trip(filled):
    st, _url, tmp = filled
    n = export_jsonl(st, tmp / "out.jsonl")
    rows = [json.loads(line) for line in (tmp / "out.jsonl").read_text().splitlines()]
    ended = [e for e in st.iter_episodes() if e.status.value == "ended"]
    assert n == len(rows) == len(ended) > PAGE // 2
    for row in rows:
        ep = st.get_episode(row["episode_uuid"])
        call = st.calls(ep.uuid)[0]
        assert row["reward"] == ep.reward and row["task_id"] == ep.task_id
        c = row["calls"][0]
        assert (c["prompt_ids"], c["completion_ids"], c["logprobs"]) == (
            call.prompt_ids,
            call.completion_ids,
            call.logprobs,
        )
        assert c["messages"][0]["content"] == f"q{int(ep.uuid[2:])}" and c["response"] == f"a{int(ep.uuid[2:])}"


def test_parquet_round_trip_and_since(filled):
    st, _url, tmp = filled
    n = export_parquet(st, tmp / "out.parquet")
    table = pq.read_table(tmp / "out.parquet").to_pylist()
    assert n == len(table)
    by_id = {r["episode_uuid"]: r for r in table}
    for uuid, row in by_id.items():
        call = st.calls(uuid)[0]
        assert row["calls"][0]["prompt_ids"] == call.prompt_ids and row["reward"] == st.get_episode(uuid).reward
    later = export_jsonl(st, tmp / "later.jsonl", since_step=2)  # step 1's episodes are left out
    assert later == n - 6


def test_inspection_commands(filled):
    _st, url, _tmp = filled

    def run(*a):
        cmd = [sys.executable, "-m", "ajet_proxy.cli", *a, "--db", url]
        return subprocess.run(cmd, capture_output=True, text=True, env=offline_env(), check=True).stdout

    listing = run("episodes", "list", "--status", "ended")
    assert "ep0001" in listing and "ep0000" not in listing
    shown = run("episodes", "show", "ep0004")
    assert "[user] q4" in shown and "[answer] a4" in shown and "prompt 3 / completion 2 tokens" in shown


def test_export_and_inspection_take_one_experiment_of_the_swarm(filled):
    """`--experiment NAME` reads that experiment's store beside the first; a name the swarm does not list is one
    clear line and exit 1."""
    from ajet_store import experiment_store

    st, url, tmp = filled
    with experiment_store(st, "p/b") as other:
        other.sync_job(AgentJetJob(project_name="p", experiment_name="b"))
        other.transition(ExperimentState.ROLLING)
        other.begin_episode("b0", "hb0", "c", "train", 60)
        other.write_calls([CallRecord("b0", 0, "{}", "{}", [1], [2], [-0.5], "stop", 0, "d", 1.0, 1.0)])
        other.end_episode("b0", "c", "t", 1.0, None, {})

    def run(*a: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "ajet_proxy.cli", *a, "--db", url]
        return subprocess.run(cmd, capture_output=True, text=True, env=offline_env())

    out = tmp / "b.jsonl"
    done = run("export", "--experiment", "p/b", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["episode_uuid"] for line in out.read_text().splitlines()] == ["b0"]
    assert "b0" in run("episodes", "list", "--experiment", "p/b").stdout
    assert "b0" not in run("episodes", "list").stdout  # the default experiment's own
    missing = run("export", "--experiment", "p/nope")
    assert missing.returncode == 1 and "no experiment 'p/nope' (it has: ajet-swarm/default, p/b)" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1

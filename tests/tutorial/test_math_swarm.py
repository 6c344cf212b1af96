"""The math-agent tutorial: its reward, its sandboxed tool, its multi-turn loop, and a training step."""

import re
import time

import pytest

from ajet import AgentJetJob, SwarmClient, Task
from ajet.types import EpisodeStatus
from tests.support.rolling import ensure_rolling
from tests.support.swarm import running_swarm
from tutorial.example_math_swarm.agent_run import boxed, compute_reward, run_agent_and_compute_reward
from tutorial.example_math_swarm.python_tool import run_python


@pytest.mark.parametrize(
    "answer,reference,reward",
    [
        ("so \\boxed{31}", "3*12=36\n#### 31", 1.0),
        ("\\boxed{1,013}", "#### 1013", 1.0),
        ("\\boxed{$29.0}", "#### 29", 1.0),
        ("\\boxed{30} no wait \\boxed{31}", "#### 31", 1.0),
        ("\\boxed{32}", "#### 31", 0.0),
        ("31", "#### 31", 0.0),  # no box, no reward
        ("\\boxed{thirty}", "#### 31", 0.0),
    ],
)
def test_reward(answer, reference, reward):
    assert compute_reward(answer, reference) == reward
    assert boxed("a \\boxed{1} b \\boxed{2}") == "2"


def test_python_tool_runs_code_with_limits_and_no_network():
    assert run_python("print(6 * 7)").strip() == "42"
    assert "ZeroDivisionError" in run_python("1/0")
    assert run_python("import time; time.sleep(10)", time_limit=1.0) == "error: timed out after 1s"
    blocked = run_python("import socket; socket.create_connection(('127.0.0.1', 9))")
    assert "network access is disabled" in blocked
    assert run_python("import os; print(os.environ.get('HOME'))").strip() == "None"


def test_multi_turn_tool_loop_is_logged_and_merged(proxy, store, stub):
    """Against the vLLM-format stub: it calls the tool, gets the output back, answers; 2 calls logged."""
    client = SwarmClient(proxy.url)
    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=1, num_repeat=1, experiment_name="math"))
    uuid, creds = client.begin_episode()
    task = Task(task_id="m1", main_query="CALL_TOOL to compute 6*7", metadata={"answer": "#### 42"})
    out = run_agent_and_compute_reward(task, creds.base_url, creds.api_key)
    client.end_episode(task, uuid, out)
    calls = store.calls(uuid)
    assert out.metadata["tool_calls"] == 1 and len(calls) == 2
    assert calls[0].finish_reason == "tool_calls" and calls[1].finish_reason == "stop"
    second_messages = __import__("json").loads(calls[1].request)["messages"]
    assert second_messages[-1]["role"] == "tool" and "code" in second_messages[-1]["content"]
    assert out.reward == 0.0  # the stub never boxes an answer


@pytest.mark.slow
def test_math_swarm_trains_on_the_tiny_model(tmp_path):
    with running_swarm(tmp_path, name="math") as sw:
        res = sw.run_module(
            "tutorial.example_math_swarm.agent_roll",
            "--swarm-url",
            sw.url,
            "--max-steps",
            "1",
            "--grpo-n",
            "2",
            "--batch-size",
            "2",
            "--max-tokens",
            "24",
            timeout=400,
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + sw.logs()
        assert re.search(r"done: [1-9]\d* training step", res.stdout), res.stdout[-500:]
        st = sw.store()
        ended = st.episodes(status=EpisodeStatus.ENDED)
        assert len(ended) >= 4 and st.steps()[0].num_episodes == 4
        for ep in ended:
            calls = st.calls(ep.uuid)
            assert calls and all(c.prompt_ids and c.completion_ids for c in calls)
            final = ep.metadata["workflow"]["final"]  # the last 500 characters of the answer
            assert ep.reward == compute_reward(final, ep.metadata["task"]["metadata"]["answer"])


@pytest.mark.slow
def test_seed_000_demo_1_full_code_trains_as_written(tmp_path, monkeypatch):
    """The seed's Demo 1 "Full code" (its imports and loop; constants changed) trains on the tiny model."""
    with running_swarm(tmp_path, name="seed") as sw:
        monkeypatch.setenv("AJET_SWARM_URL", sw.url)  # the child inherits it, as its REMOTE_SWARM_URL constant
        monkeypatch.setenv("AJET_MAX_TASKS", "4")  # two steps of 2 tasks x 2 episodes
        res = sw.run_module("tutorial.example_math_swarm.seed_demo1", timeout=400)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + sw.logs()
        st = sw.store()
        assert res.stdout.count("[") >= 2  # the seed prints each batch's rewards
        deadline = time.monotonic() + 60
        while len(st.steps()) < 2:  # the second batch's step runs after the client is done
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.5)
        assert [s.num_episodes for s in st.steps()[:2]] == [4, 4]  # batch 2 x grpo 2
        ended = st.episodes(status=EpisodeStatus.ENDED)
        assert all(
            st.calls(ep.uuid) and all(c.prompt_ids and c.completion_ids for c in st.calls(ep.uuid)) for ep in ended
        )

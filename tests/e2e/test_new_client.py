"""`ajet-swarm new-client NAME` scaffolds a client that runs against the tiny model unchanged."""

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from ajet import ConfigError, Task
from ajet.scaffold import new_client, skill_text
from ajet.types import EpisodeStatus
from tests.support.procs import offline_env
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow


def test_scaffold_layout_and_refusals(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ajet_swarm.cli import main; "
            f"sys.exit(main(['new-client', 'demo_q', '--root', '{tmp_path}']))",
        ],
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    assert res.returncode == 0, res.stderr
    dest = tmp_path / "tutorial" / "opencode_build_demo_q"
    assert sorted(p.name for p in dest.iterdir()) == [
        "SKILL.md",
        "__init__.py",
        "agent_roll.py",
        "agent_run.py",
        "data.jsonl",
        "readme.md",
        "reference",
    ]
    run = (dest / "agent_run.py").read_text()
    assert all(f"def {fn}(" in run for fn in ("_execute_agent", "_compute_reward", "run_agent_and_compute_reward"))
    assert "def rollout(" in (dest / "agent_roll.py").read_text()
    assert (dest / "reference" / "swarm_guide.md").read_text().startswith("# The swarm")
    assert "write-swarm-client" in skill_text() and (dest / "SKILL.md").read_text() == skill_text()
    with pytest.raises(ConfigError, match="exists"):
        new_client("demo_q", tmp_path)
    with pytest.raises(ConfigError, match="lowercase"):
        new_client("Bad-Name", tmp_path)


def test_scaffolded_client_trains_on_the_tiny_model(tmp_path):
    dest = new_client("smoke", tmp_path)
    with running_swarm(tmp_path) as sw:
        res = sw.run_module(
            "tutorial.opencode_build_smoke.agent_roll", "--swarm-url", sw.url, "--max-steps", "1", root=tmp_path
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + sw.logs()
        assert re.search(r"done: [1-9]\d* training step", res.stdout), res.stdout[-500:]
        store = sw.store()
        ended = store.episodes(status=EpisodeStatus.ENDED)
        assert len(ended) >= 16 and store.steps()[0].num_episodes == 16
        spec = importlib.util.spec_from_file_location("scaffolded_agent_run", dest / "agent_run.py")
        agent_run = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(agent_run)  # by path: another `tutorial` package may be imported already
        compute_reward = agent_run._compute_reward

        tasks = {
            json.loads(line)["task_id"]: json.loads(line) for line in (dest / "data.jsonl").read_text().splitlines()
        }
        for ep in ended:
            calls = store.calls(ep.uuid)
            assert calls and calls[0].prompt_ids and calls[0].completion_ids  # recorded with token ids
            answer = ep.metadata["workflow"]["answer"]
            assert ep.reward == compute_reward(Task(**tasks[ep.task_id], metadata=tasks[ep.task_id]), answer)


def test_the_skill_says_what_the_seed_says():
    text = skill_text()
    assert "you do not run the swarm or the training" in text  # the user runs them
    assert "Ask the user" in text and "trans_roll.py" in text and "AJET_JUDGE_BASE_URL" in text
    assert all(name in text for name in ("_execute_agent", "_compute_reward", "run_agent_and_compute_reward"))
    assert "reference/swarm_guide.md" in text


def test_the_templates_judge_scores_strictly(tmp_path, monkeypatch):
    import httpx

    dest = new_client("judged", tmp_path)
    spec = importlib.util.spec_from_file_location("judged_agent_run", dest / "agent_run.py")
    agent_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent_run)
    answers = iter(["Score: 7/10", "I cannot grade this", "Score: 12/10"])

    def post(url, **kw):
        assert url == "http://judge.invalid/v1/chat/completions" and "Bearer k" in kw["headers"]["Authorization"]
        return httpx.Response(
            200, json={"choices": [{"message": {"content": next(answers)}}]}, request=httpx.Request("POST", url)
        )

    monkeypatch.setattr(agent_run.httpx, "post", post)
    with pytest.raises(agent_run.JudgeError, match="AJET_JUDGE_BASE_URL"):
        agent_run._judge("q", "a")
    monkeypatch.setenv("AJET_JUDGE_BASE_URL", "http://judge.invalid/v1")
    monkeypatch.setenv("AJET_JUDGE_API_KEY", "k")
    assert agent_run._judge("q", "a") == pytest.approx(0.7)
    for _ in range(2):  # no score, or one out of range: never a made-up number
        with pytest.raises(agent_run.JudgeError):
            agent_run._judge("q", "a")

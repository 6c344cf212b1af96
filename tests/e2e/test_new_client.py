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
    res = subprocess.run([sys.executable, "-c", "import sys; from ajet_swarm.cli import main; "
                          f"sys.exit(main(['new-client', 'demo_q', '--root', '{tmp_path}']))"],
                         capture_output=True, text=True, env=offline_env())
    assert res.returncode == 0, res.stderr
    dest = tmp_path / "tutorial" / "opencode_build_demo_q"
    assert sorted(p.name for p in dest.iterdir()) == ["SKILL.md", "__init__.py", "agent_roll.py", "agent_run.py",
                                                      "data.jsonl", "readme.md"]
    assert "run_agent_and_compute_reward" in (dest / "agent_run.py").read_text()
    assert "write-swarm-client" in skill_text() and (dest / "SKILL.md").read_text() == skill_text()
    with pytest.raises(ConfigError, match="exists"):
        new_client("demo_q", tmp_path)
    with pytest.raises(ConfigError, match="lowercase"):
        new_client("Bad-Name", tmp_path)


def test_scaffolded_client_trains_on_the_tiny_model(tmp_path):
    dest = new_client("smoke", tmp_path)
    with running_swarm(tmp_path) as sw:
        res = sw.run_module("tutorial.opencode_build_smoke.agent_roll", "--swarm-url", sw.url, "--max-steps", "1",
                            root=tmp_path)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:] + sw.logs()
        assert re.search(r"done: [1-9]\d* training step", res.stdout), res.stdout[-500:]
        store = sw.store()
        ended = store.episodes(status=EpisodeStatus.ENDED)
        assert len(ended) >= 16 and store.steps()[0].num_episodes == 16
        spec = importlib.util.spec_from_file_location("scaffolded_agent_run", dest / "agent_run.py")
        agent_run = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(agent_run)  # by path: another `tutorial` package may be imported already
        compute_reward = agent_run.compute_reward

        tasks = {json.loads(line)["task_id"]: json.loads(line) for line in (dest / "data.jsonl").read_text().splitlines()}
        for ep in ended:
            calls = store.calls(ep.uuid)
            assert calls and calls[0].prompt_ids and calls[0].completion_ids  # recorded with token ids
            answer = ep.metadata["workflow"]["answer"]
            assert ep.reward == compute_reward(Task(**tasks[ep.task_id], metadata=tasks[ep.task_id]), answer)

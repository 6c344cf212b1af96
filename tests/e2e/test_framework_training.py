"""The frameworks' default agents trained through `ajet-swarm start`: the trainer's embedded engine answers with
what a test scripts (`tests.support.faults.scripted_policy_env`; the trainer trains the model itself), each default
agent of `tests.support.framework_agents` (those of .venv-frameworks too) completes two episodes of its own task
(rewards 1 and 0), and each such group is one training step, recorded in the store."""

import json
import time

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet_store import Store, sqlite_url
from ajet_swarm.launch import launched_swarm
from tests.proxy.test_framework_envs import require_framework_env
from tests.support.faults import scripted_policy_env
from tests.support.framework_agents import AGENTS, ENV_AGENTS
from tests.support.scripted_swarm import script_ids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_each_default_agent_completes_and_trains_through_ajet_swarm_start(tmp_path):
    from transformers import AutoTokenizer

    require_framework_env()
    agents = {**AGENTS, **ENV_AGENTS}
    from ajet_trainer.tiny_model import builtin_model_path

    tok = AutoTokenizer.from_pretrained(str(builtin_model_path("builtin:tiny")))
    script = tmp_path / "policy.json"
    job = AgentJetJob(
        model="builtin:tiny", batch_size=1, num_repeat=2, lr=1e-4, max_prompt_length=16_000,
        max_response_length=16_000, max_model_len=32_768, max_response_length_in_one_turn=256,
    )  # fmt: skip
    with launched_swarm(tmp_path / "swarm", env=scripted_policy_env(script)) as url:
        client = SwarmClient(url)
        client.sync_train_config(job)
        client.start_engine()
        for name, agent in agents.items():
            for reward in (1.0, 0.0):
                uuid, creds = client.begin_episode()  # waits while the last group's step runs
                script.write_text(json.dumps([script_ids(tok, a) for a in agent.answers]))
                assert agent.run(creds) == agent.final, name
                client.end_episode(Task(task_id=name), uuid, WorkflowOutput(reward=reward))
        client.close()
        store = Store(sqlite_url(tmp_path / "swarm" / "ajet-swarm.db"))
        deadline = time.monotonic() + 60
        while len(steps := store.steps()) < len(agents) and time.monotonic() < deadline:  # the last group's step
            time.sleep(0.2)
        episodes = [e for e in store.episodes() if e.status.value == "ended"]
        assert len(steps) == len(agents) and all(s.num_episodes == 2 for s in steps)
        assert len(episodes) == 2 * len(agents) and all(e.consumed_step is not None for e in episodes)
        calls = [c for e in episodes for c in store.calls(e.uuid)]
        assert calls and all(c.error is None and c.completion_ids and c.logprobs for c in calls)
        store.close()

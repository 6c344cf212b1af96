"""The seed documents' code, as written: each import line resolves, and the API calls they make behave as the
seeds say (against a real proxy on a vLLM-format stub)."""

import threading
import time

import httpx
import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.errors import SwarmTimeout
from ajet.types import EpisodeStatus
from tests.support.rolling import ensure_rolling

SEED_IMPORTS = [
    # seed 000, Demo 1 "Full code"
    "from ajet.copilot.job import AgentJetJob",
    "from ajet.tuner_lib.experimental.as_swarm_client import SwarmClient, run_episodes_until_all_complete",
    "from ajet.default_config.ajet_default import AjetTaskReader, HuggingfaceDatRepo",
    "from ajet.task_reader import RouterTaskReader",
    # the swarm guide and the write-swarm-client skill's templates
    "from ajet.tuner_lib.experimental.as_swarm_client import auto_train_with_dataset",
    "from ajet.tuner_lib.experimental.as_swarm_client import SwarmClient",
    "from ajet.schema.task import Task, WorkflowOutput",
    "from ajet.tuner_lib.as_oai_baseurl_apikey import OpenaiBaseUrlAndApiKey",
    "from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor, BoundedThreadPoolExecutor",
    "from ajet.default_config.ajet_default import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp",
    "from ajet import WorkflowOutput",
]


@pytest.mark.parametrize("line", SEED_IMPORTS)
def test_each_seed_import_line_resolves(line):
    exec(compile(line, "<seed>", "exec"), {})  # noqa: S102 - the seed's own line, run as a user would


@pytest.fixture(scope="module")
def client(proxy, store, stub):
    c = SwarmClient(proxy.url)
    ensure_rolling(c, store, stub.url, job=AgentJetJob(batch_size=64, num_repeat=2))
    yield c
    c.close()


def execute_agent(task: Task, api_baseurl_key) -> WorkflowOutput:
    """The seed's agent shape: raw HTTP to the episode's base URL with its key."""
    resp = httpx.post(
        f"{api_baseurl_key.base_url}/chat/completions",
        json={"model": "fill_whatever_model", "messages": [{"role": "user", "content": task.main_query}]},
        headers={"Authorization": f"Bearer {api_baseurl_key.api_key}"},
    )
    resp.raise_for_status()
    return WorkflowOutput(reward=float(len(task.main_query)), metadata={"final_answer": resp.json()["choices"][0]})


def test_credentials_carry_their_episode_uuid(client):
    uuid, api_baseurl_key = client.begin_episode()
    assert api_baseurl_key.episode_uuid == uuid
    client.abort_episode(uuid)


def test_abort_episode_takes_the_end_episode_arguments_too(client, store):
    task = Task(task_id="seed-abort", main_query="q")
    uuid, key = client.begin_episode()
    output = execute_agent(task, key)
    client.abort_episode(task, uuid, output)  # "just replace end_episode with abort_episode"
    assert store.get_episode(uuid).status == EpisodeStatus.ABORTED
    uuid2, _ = client.begin_episode()
    client.abort_episode(uuid2)
    assert store.get_episode(uuid2).status == EpisodeStatus.ABORTED
    with pytest.raises(TypeError):
        client.abort_episode(task)


def test_the_seeds_training_loop_runs_as_written(client):
    from ajet.tuner_lib.experimental.as_swarm_client import run_episodes_until_all_complete

    def rollout(task) -> float | None:
        episode_uuid, api_baseurl_key = client.begin_episode()
        workflow_output = execute_agent(task, api_baseurl_key)
        client.end_episode(task, episode_uuid, workflow_output)
        return workflow_output.reward

    next_batch = [Task(task_id=f"t{i}", main_query="x" * (i + 1)) for i in range(3) for _ in range(2)]
    episode_results = run_episodes_until_all_complete(next_batch, func=rollout, auto_retry=True)
    assert episode_results == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


def test_auto_train_with_dataset(client):
    from ajet.tuner_lib.experimental.as_swarm_client import auto_train_with_dataset

    class Dataset:
        def generate_training_tasks(self):
            return [Task(task_id=f"d{i}", main_query="y" * (i + 1)) for i in range(3)]

    rewards = auto_train_with_dataset(Dataset(), client, execute_agent, local_grpo_n=2, remote_batch_size=2)
    assert rewards == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


def test_can_continue_episode_says_when_a_long_agent_should_stop(client):
    task = Task(task_id="seed-continue", main_query="q")
    uuid, key = client.begin_episode()
    assert client.can_continue_episode(uuid) is True
    client.end_episode(task, uuid, execute_agent(task, key))
    assert client.can_continue_episode(uuid) is False
    aborted, _ = client.begin_episode()
    client.abort_episode(aborted)
    assert client.can_continue_episode(aborted) is False
    assert client.can_continue_episode("no-such-episode") is False


def test_can_continue_episode_turns_false_when_the_server_expires_it(client, store):
    import time

    uuid, _ = client.begin_episode(discard_episode_timeout=0.5)
    deadline = time.monotonic() + 30
    while client.can_continue_episode(uuid):
        assert time.monotonic() < deadline, "the episode never expired"
        time.sleep(0.2)
    assert store.get_episode(uuid).status == EpisodeStatus.EXPIRED


def test_wait_for_step_returns_the_first_step_after_the_given_one(client, store):
    from ajet import wait_for_step

    now = store.experiment().global_step
    store.record_step(now + 1, now + 1, [], 0.25, {})
    store.record_step(now + 2, now + 2, [], 0.5, {})
    assert wait_for_step(client, now).step == now + 1  # the oldest newer step, not the newest
    later = threading.Timer(0.3, lambda: store.record_step(now + 3, now + 3, [], 0.75, {}))
    later.start()
    t0 = time.monotonic()
    step = wait_for_step(client, now + 2, timeout=10)
    assert (step.step, step.reward_mean) == (now + 3, 0.75) and time.monotonic() - t0 >= 0.25
    with pytest.raises(SwarmTimeout):
        wait_for_step(client, now + 3, timeout=0.2)

"""A mission mix, enforced by the server: a capped mission's clients wait once its share of the batch is in
flight, the step takes no more than its share, and the statistics (the monitor's Missions tab) show it."""

import time

import pytest

from ajet import AgentJetJob, SwarmClient, SwarmTimeout, Task, WorkflowOutput
from ajet.types import BatchMode
from ajet_store.batch_policy import select_batch
from tests.support.rolling import ensure_rolling

JOB = AgentJetJob(batch_size=2, num_repeat=2, mission_mix={"math": 0.5})


@pytest.fixture(scope="module")
def clients(proxy, store, stub):
    math = SwarmClient(proxy.url, mission="math", begin_episode_max_wait=1.0)
    code = SwarmClient(proxy.url, mission="code", begin_episode_max_wait=1.0)
    ensure_rolling(math, store, stub.url, job=JOB)
    yield math, code
    math.close()
    code.close()


def _episode(client: SwarmClient, task_id: str, reward: float) -> None:
    uuid, creds = client.begin_episode()
    creds.as_openai_client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": task_id}], max_tokens=2
    )
    client.end_episode(Task(task_id=task_id), uuid, WorkflowOutput(reward=reward))


def test_a_capped_mission_waits_once_its_share_is_in_flight(clients, store):
    math, code = clients
    _episode(math, "m1", 1.0)
    _episode(math, "m1", 0.0)  # half of 2 tasks x 2 repeats: math's share is in flight (waiting in the pool)
    t0 = time.monotonic()
    with pytest.raises(SwarmTimeout, match="share of the batch"):
        math.begin_episode()
    assert time.monotonic() - t0 >= 0.5  # it waited and retried (503 + Retry-After), as for a busy engine
    math.begin_episode(episode_type="eval")  # eval episodes never train: not capped
    for reward in (1.0, 0.0):  # an uncapped mission fills the rest
        _episode(code, "c1", reward)
    batch = select_batch(store.pool_episodes(), BatchMode.TASKS, 2, 2, JOB.mission_mix)
    assert sorted(e.task_id for e in batch) == ["c1", "c1", "m1", "m1"]


def test_the_statistics_show_the_mix(clients):
    math, _code = clients
    missions = {m.mission: m for m in math.get_rollout_stat().missions}
    assert missions["math"].max_batch_share == 0.5 and missions["math"].pooled == 2
    assert missions["code"].max_batch_share is None and missions["code"].pooled == 2


def test_a_share_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="mission_mix"):
        AgentJetJob(mission_mix={"math": 1.5})

"""Evaluations through a real proxy (`ajet.evaluation`, the proxy's evaluation routes): a held-out task set run as
eval episodes with the user's agent, its mean reward and pass@k computed by the proxy from the stored episodes and
kept with the policy version that served it; an evaluation that lists an episode it may not count is refused
naming it."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import openai
import pytest

from ajet import AsyncSwarmClient, EvaluationFailed, Task, WorkflowOutput, evaluate, evaluate_async
from ajet.errors import InvalidRequest

REWARDS = {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0], "c": [1, 1, 0, 1]}
"""Each task's four samples' rewards (in the order its episodes end)."""
TASKS = [Task(task_id=t, main_query=f"say {t}") for t in REWARDS]


def scripted_agent():
    """A blocking agent (the seeds' signature) that makes one call and gives each task's rewards in turn."""
    seen: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def agent(task: Task, base_url: str, api_key: str) -> WorkflowOutput:
        llm = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": task.main_query}],
                                    max_tokens=2)  # fmt: skip
        with lock:
            i, seen[task.task_id] = seen[task.task_id], seen[task.task_id] + 1
        return WorkflowOutput(reward=float(REWARDS[task.task_id][i]))

    return agent


def test_an_evaluation_is_recorded_with_its_figures_and_the_policy_that_served_it(swarm):
    client = swarm.client
    report = evaluate(client, TASKS, scripted_agent(), name="held_out", k=2, samples=4)
    assert (report.name, report.k, report.tasks, report.episodes) == ("held_out", 2, 3, 12)
    assert report.mean_reward == pytest.approx(4 / 12)
    assert report.pass_at_k == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert (report.version_min, report.version_max) == (0, 0)
    assert client.get_evaluations("held_out")[-1] == report
    assert client.get_rollout_stat().last_evaluation == report  # what the monitor shows
    assert swarm.store.steps() == []  # eval episodes never train
    again = evaluate(client, TASKS[:1], scripted_agent(), name="other")
    assert [e.name for e in client.get_evaluations()][-2:] == ["held_out", "other"]
    assert client.get_evaluations("other") == [again] and again.pass_at_k == 1.0


def test_the_async_evaluation_records_the_same_way(swarm):
    async def agent(task: Task, creds) -> WorkflowOutput:
        llm = openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key, max_retries=0)
        await llm.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        await llm.close()
        return WorkflowOutput(reward=0.5, is_success=task.task_id == "a")

    async def run():
        async with AsyncSwarmClient(swarm.client.server_url) as client:
            return await evaluate_async(client, TASKS, agent, name="async", k=1)

    report = asyncio.run(run())
    assert report.mean_reward == 0.5 and report.pass_at_k == pytest.approx(1 / 3)  # is_success decides a pass


def test_an_agent_that_keeps_failing_records_nothing(swarm):
    def broken(task: Task, base_url: str, api_key: str) -> WorkflowOutput:
        raise RuntimeError("the agent broke")

    with pytest.raises(EvaluationFailed, match="3 of 3 episodes failed: RuntimeError"):
        evaluate(swarm.client, TASKS, broken, name="broken", max_retries=1)
    assert swarm.client.get_evaluations("broken") == []


def test_only_ended_eval_episodes_of_the_experiment_count(swarm):
    client = swarm.client
    train_uuid, _ = client.begin_episode()
    open_uuid, _ = client.begin_episode(episode_type="eval")
    try:
        cases = [(train_uuid, "is a train episode"), (open_uuid, "has not ended with a reward"),
                 ("no-such-episode", "no episode 'no-such-episode' in this experiment")]  # fmt: skip
        for uuid, why in cases:
            with pytest.raises(InvalidRequest, match=why) as err:
                client.record_evaluation("held_out", [uuid])
            assert err.value.status == 422 and "episode_uuids.0" in str(err.value)
        with pytest.raises(InvalidRequest, match="an episode is listed twice"):
            client.record_evaluation("held_out", [open_uuid, open_uuid])  # refused before it is sent
    finally:
        client.abort_episode(train_uuid)
        client.abort_episode(open_uuid)


def test_the_monitor_shows_the_last_evaluation():
    from ajet.evaluation_types import EvaluationInfo
    from ajet_proxy.overwatch_views import evaluation_text

    e = EvaluationInfo(id=3, name="held_out", k=4, tasks=32, episodes=128, mean_reward=0.4, pass_at_k=0.8125,
                       version_min=6, version_max=6, global_step=7, created_at=0.0)  # fmt: skip
    assert evaluation_text(e) == "\nheld-out held_out (v6, step 7): reward 0.400  pass@4 0.812  32 tasks"
    assert "(v6-7, step 7)" in evaluation_text(e.model_copy(update={"version_max": 7}))
    assert evaluation_text(None) == ""

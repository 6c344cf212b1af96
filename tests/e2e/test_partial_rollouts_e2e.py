"""Partial rollouts end to end (`AgentJetJob(partial_rollouts=True)`): proxy + trainer processes, a real store.

A step no longer waits for an open episode: with one episode left open (a long answer, an agent still working)
the next batch trains at once, where without the option it would wait for it (up to `drain_timeout`). A call made
while the weights change is held by the engine, not refused: the update is held at a gate the test opens, and the
call, made in WEIGHT_SYNCING, is answered by the new policy. The open episode goes on into a later batch, where
its older tokens train with the behaviour correction.
"""

from __future__ import annotations

import threading

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import ExperimentState
from tests.support.faults import GATE_HELD, update_gate_env
from tests.support.swarm import running_swarm
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow


def job() -> AgentJetJob:
    return AgentJetJob(
        model="builtin:tiny", batch_size=1, num_repeat=2, lr=1e-2, max_prompt_length=64, max_response_length=16,
        max_model_len=128, max_response_length_in_one_turn=4, partial_rollouts=True, drain_timeout=600,
    )  # fmt: skip


def call(creds, k: int = 0) -> object:
    return creds.as_openai_client(max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "say"}], max_tokens=2, seed=k
    )


def group(client: SwarmClient, task: str) -> list[str]:
    out = []
    for k in range(2):
        uuid, creds = client.begin_episode()
        call(creds, k)
        client.end_episode(Task(task_id=task), uuid, WorkflowOutput(reward=float(k)))
        out.append(uuid)
    return out


def _numbered(client: SwarmClient, uuid: str) -> int:
    """Calls of an open episode numbered so far (a call is numbered as it goes to the engine)."""
    return next((e.num_calls for e in client.get_rollout_stat().open_episodes if e.episode_uuid == uuid), 0)


def test_an_open_episode_never_holds_a_step_and_calls_during_an_update_are_held(tmp_path):
    gate = tmp_path / "update-gate"
    gate.touch()
    with running_swarm(tmp_path, **update_gate_env(gate)) as sw:
        client, store = sw.client(), sw.store()
        client.auto_sync_train_config_and_start_engine(job())
        open_uuid, open_creds = client.begin_episode()
        call(open_creds)  # answered by v0; the episode stays open
        group(client, "a")
        wait_for(lambda: GATE_HELD in sw.logs(), "the update of step 1, past the drain")
        assert client.get_engine_status().state == ExperimentState.WEIGHT_SYNCING  # not waiting for the open one
        answered: dict = {}
        asking = threading.Thread(target=lambda: answered.update(answer=call(open_creds, 1)))
        asking.start()  # made while the weights change: held by the engine, not refused
        wait_for(lambda: _numbered(client, open_uuid) == 2, "the call sent to the engine")  # past the proxy's check
        assert asking.is_alive() and client.get_engine_status().state == ExperimentState.WEIGHT_SYNCING  # held
        gate.unlink()
        asking.join(120)
        assert "answer" in answered, "the call made during the update was refused or failed"
        wait_for(lambda: client.get_engine_status().global_step >= 1, "step 1")
        calls = wait_for(lambda: len(store.calls(open_uuid)) == 2 and store.calls(open_uuid), "both calls logged")
        assert [c.policy_version for c in calls] == [0, 1]  # the held call ran on the new weights
        client.end_episode(Task(task_id="b"), open_uuid, WorkflowOutput(reward=1.0))
        uuid, creds = client.begin_episode()
        call(creds)
        client.end_episode(Task(task_id="b"), uuid, WorkflowOutput(reward=0.0))
        wait_for(lambda: client.get_engine_status().global_step >= 2, "step 2")
        assert store.get_episode(open_uuid).consumed_step == 2  # it went on into a later batch
        step2 = {s.step: s for s in store.steps()}[2]
        assert "tis_weight_mean" in step2.metrics  # its v0 tokens train with the behaviour correction
        assert step2.metrics["partial/generated_answers"] >= 2  # the engine's answers since step 1, and their length
        assert (
            step2.metrics["partial/trained_answer_tokens_mean"] > 0 and "partial/mixed_version_share" in step2.metrics
        )
        client.close()

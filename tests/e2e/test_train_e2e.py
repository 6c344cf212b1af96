"""Proxy + trainer + a seed-API client on the tiny model: real processes, real HTTP, a real store."""

import time
from pathlib import Path

import pytest
import requests
import torch
from safetensors.torch import load_file

from ajet.copilot.job import AgentJetJob
from ajet.schema.task import Task, WorkflowOutput
from ajet.tuner_lib.experimental.swarm_client import SwarmClient
from ajet.types import EpisodeStatus, ExperimentState
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.exports import assert_export_matches_the_served_policy
from tests.support.faults import GATE_HELD, update_gate_env
from tests.support.swarm import running_swarm

pytestmark = pytest.mark.slow

TASKS = [Task(task_id=f"letter-{c}", main_query=f"Say the letter: {c}", metadata={"letter": c}) for c in "ab"]


def tiny_job(**kw) -> AgentJetJob:
    return AgentJetJob(
        model="builtin:tiny",
        batch_size=2,
        num_repeat=2,
        lr=1e-2,
        save_freq=1,
        max_prompt_length=64,
        max_response_length=16,
        max_model_len=128,
        max_response_length_in_one_turn=4,
        **kw,
    )


def seed_agent(task: Task, creds, seed: int) -> WorkflowOutput:
    """An agent written from the original docs: raw requests with the episode key."""
    resp = requests.post(
        f"{creds.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {creds.api_key}"},
        json={
            "model": creds.model,
            "messages": [{"role": "user", "content": task.main_query}],
            "max_tokens": 2,
            "logprobs": True,
            "temperature": 0 if seed == 0 else 1.0,
            "seed": seed,
        },
        timeout=60,
    )
    resp.raise_for_status()
    text = resp.json()["choices"][0]["message"]["content"] or ""
    return WorkflowOutput(reward=1.0 if text[:1] == task.metadata["letter"] else float(seed % 2))


def wait_step(client: SwarmClient, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while client.get_engine_status().global_step < step:
        assert time.monotonic() < deadline, f"step {step} not reached"
        time.sleep(0.1)


def run_batch(client: SwarmClient, batch: int) -> list[str]:
    uuids = []
    for task in TASKS:
        for k in range(2):
            uuid, creds = client.begin_episode()
            client.end_episode(task, uuid, seed_agent(task, creds, seed=batch * 10 + k))
            uuids.append(uuid)
    return uuids


@pytest.fixture
def swarm(tmp_path):
    with running_swarm(tmp_path, trainer=False) as sw:
        yield sw


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_trains_and_serves_new_weights(swarm, lora_rank):
    trainer, exp = swarm.start_trainer(), swarm.exp_dir
    client = swarm.client()
    client.auto_sync_train_config_and_start_engine(tiny_job(lora_rank=lora_rank))
    store = swarm.store()
    evals, aborted = [], []
    for task in TASKS:  # debugging during training: eval and aborted episodes never reach training
        uuid, creds = client.begin_episode(episode_type="eval")
        client.end_episode(task, uuid, seed_agent(task, creds, seed=1))
        evals.append(uuid)
        uuid, creds = client.begin_episode()
        seed_agent(task, creds, seed=1)
        client.abort_episode(uuid)
        aborted.append(uuid)
    batches = [run_batch(client, b) for b in range(1)]
    wait_step(client, 1)
    batches.append(run_batch(client, 1))
    wait_step(client, 2)
    status = client.get_engine_status()
    assert status.policy_version == 2 and status.global_step == 2, trainer.log_tail()
    assert status.trainer_silent_s is None and store.experiment().trainer_heartbeat  # the trainer says it is alive
    # the second batch's calls were answered by the weights of step 1
    assert {c.policy_version for u in batches[0] for c in store.calls(u)} == {0}
    assert {c.policy_version for u in batches[1] for c in store.calls(u)} == {1}
    for step, uuids in enumerate(batches, start=1):
        assert {store.get_episode(u).consumed_step for u in uuids} == {step}
    assert all(store.get_episode(u).consumed_step is None for u in evals + aborted)
    assert all(store.get_episode(u).status == EpisodeStatus.ABORTED for u in aborted)
    # the weights changed, and the checkpoint holds them
    ckpt = exp / "checkpoints" / "step_2"
    if lora_rank:
        adapter = load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))
        assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())  # lora_B starts at zero
    else:
        base = load_file(str(Path(builtin_model_path("builtin:tiny")) / "model.safetensors"))
        trained = load_file(str(ckpt / "model" / "model.safetensors"))
        assert any(not torch.equal(base[k], trained[k]) for k in trained if k in base)
    assert_export_matches_the_served_policy(client, store, exp, lora_rank)
    assert (exp / "metrics.jsonl").read_text().count("\n") == 2
    steps = store.steps()
    assert [s.step for s in steps] == [1, 2] and all("loss" in s.metrics and "grad_norm" in s.metrics for s in steps)
    client.stop_engine()
    time.sleep(1.0)
    assert store.engines() == [] or trainer.proc.poll() is None
    assert client.get_engine_status().state == ExperimentState.OFFLINE


def test_trainer_crash_after_checkpoint_and_mid_update(swarm):
    trainer, start_trainer = swarm.start_trainer(), swarm.start_trainer
    client = swarm.client()
    client.auto_sync_train_config_and_start_engine(tiny_job())
    store = swarm.store()
    all_ended = run_batch(client, 0)
    wait_step(client, 1)  # step 1 recorded, checkpoint step_1 on disk
    trainer.kill()  # killed after a checkpoint
    old_url = store.engines()[0].base_url
    gate = swarm.tmp / "update-gate"
    gate.touch()
    trainer = start_trainer(**update_gate_env(gate))
    deadline = time.monotonic() + 60
    while [d.base_url for d in store.engines()] in ([], [old_url]):  # until the new engine is registered
        assert time.monotonic() < deadline, trainer.log_tail()
        time.sleep(0.1)
    assert client.get_engine_status().policy_version == 1
    (dep,) = store.engines()  # the engine takes its internal key only (a fresh one per trainer process)
    assert (
        dep.api_key
        and requests.post(
            dep.base_url + "/chat/completions", timeout=30, json={"messages": [{"role": "user", "content": "hi"}]}
        ).status_code
        == 401
    )
    assert dep.api_key not in trainer.log_tail(10**7)  # the trainer logs at INFO: no key there
    all_ended += run_batch(client, 1)  # begin_episode waits while the new trainer boots
    deadline = time.monotonic() + 60
    while GATE_HELD not in trainer.log_tail(10**6):  # inside the update of step 2, held at its gate
        assert time.monotonic() < deadline, trainer.log_tail()
        time.sleep(0.1)
    assert client.get_engine_status().state == ExperimentState.WEIGHT_SYNCING
    trainer.kill()  # killed in the middle of the update of step 2
    gate.unlink()
    assert client.get_engine_status().global_step == 1
    trainer = start_trainer()
    wait_step(client, 2)
    all_ended += run_batch(client, 2)
    wait_step(client, 3)
    eps = [store.get_episode(u) for u in all_ended]
    assert all(e.status == EpisodeStatus.ENDED for e in eps)
    consumed = [e.consumed_step for e in eps]
    assert sorted(consumed) == [1] * 4 + [2] * 4 + [3] * 4  # every episode trained exactly once
    assert [s.step for s in store.steps()] == [1, 2, 3]
    assert client.get_engine_status().policy_version == 3


def test_a_job_that_cannot_boot_stops_a_waiting_begin_episode_with_the_reason(tmp_path):
    """Issue 30: a boot failure never reached the client, which stayed in `begin_episode` for 12 minutes. Now a
    waiting `begin_episode` raises `BootFailed` with the trainer's reason (not `SwarmTimeout` after its hour of
    waiting, which the pytest timeout cuts short), and the engine status says so; starting the engine again (with a
    job that boots) clears it."""
    from ajet import BootFailed

    with running_swarm(tmp_path, name="noboot") as sw:
        client = sw.client()
        client.sync_train_config(AgentJetJob(model=str(tmp_path / "no-such-model"), batch_size=1, num_repeat=1))
        client.start_engine()
        with pytest.raises(BootFailed) as failed:
            client.begin_episode()
        assert (
            failed.value.status == 409
            and "boot failed" in failed.value.detail
            and "no-such-model" in failed.value.detail
        )
        status = client.get_engine_status()
        assert status.boot_failed and status.state.value == "OFFLINE" and "no-such-model" in status.last_error
        client.sync_train_config(AgentJetJob(model="builtin:tiny", batch_size=1, num_repeat=1))
        client.start_engine()
        uuid, _creds = client.begin_episode()  # a start clears it: the new boot is waited for as ever
        assert uuid and not client.get_engine_status().boot_failed


def test_a_trainer_stopped_with_sigterm_says_so_and_begin_episode_raises_at_once(tmp_path):
    """Issue 65: the trainer exited 0 on SIGTERM but the state stayed ROLLING, and a fresh `begin_episode` raised
    only after 152-155 s. Now the trainer writes that it stopped before it exits: a begin raises `TrainerStopped` at
    once (the SDK does not wait), the status says so, and a trainer started again serves begins."""
    from ajet import TrainerStopped

    with running_swarm(tmp_path, name="sigterm") as sw:
        client = sw.client(verbose=False)
        client.auto_sync_train_config_and_start_engine(tiny_job())
        uuid, _creds = client.begin_episode()
        sw.trainer.close()  # SIGTERM, and wait for it to exit
        assert sw.trainer.proc.returncode == 0, sw.logs()
        t0 = time.monotonic()
        with pytest.raises(TrainerStopped, match="the trainer stopped"):
            client.begin_episode()
        assert time.monotonic() - t0 < 10  # not the heartbeat's 30 s, nor trainer_max_silence's 120 s
        assert client.get_engine_status().trainer_stopped_s is not None
        client.abort_episode(uuid)  # an open episode still ends as the state machine says
        sw.start_trainer()
        deadline = time.monotonic() + 120
        while client.get_engine_status().trainer_stopped_s is not None:  # until the new trainer holds the store
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.2)
        assert client.begin_episode()[0]


def test_an_open_eval_episode_never_holds_a_step(tmp_path):
    """Round three: one eval episode left open (a debugging client) kept the swarm in ROLLING_POST until it expired.
    The drain waits only for episodes that can train: steps go on, and the eval episode's next call is served by
    the policy then live, its version logged."""
    with running_swarm(tmp_path, name="evalopen") as sw:
        client, store = sw.client(), sw.store()
        client.sync_train_config(
            tiny_job(experiment_name="evalopen").model_copy(update={"batch_size": 1, "num_repeat": 1})
        )
        client.start_engine()
        eval_uuid, eval_creds = client.begin_episode(episode_type="eval", discard_episode_timeout=3600)
        seed_agent(TASKS[0], eval_creds, seed=1)
        for step in (1, 2):
            uuid, creds = client.begin_episode()
            client.end_episode(TASKS[0], uuid, seed_agent(TASKS[0], creds, seed=step))
            wait_step(client, step)  # a held step would wait for the eval episode's hour
        seed_agent(TASKS[0], eval_creds, seed=3)
        calls = store.calls(eval_uuid)
        assert [c.policy_version for c in calls] == [0, 2]
        assert all("history/template_rendered_merges" in s.metrics for s in store.steps())  # the preflight's check
        assert (
            store.get_episode(eval_uuid).status == EpisodeStatus.OPEN and not store.get_episode(eval_uuid).consumed_step
        )

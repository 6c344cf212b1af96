"""Asynchronous training (`max_staleness >= 1`) end to end: proxy + trainer processes, real HTTP, a real store.

Rollouts go on while the trainer updates; a batch takes episodes at most k versions old and drops older ones
(counted, never trained); a SIGKILL mid-update loses nothing and trains nothing twice.
"""

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus, ExperimentState
from tests.support.faults import update_delay_env, update_gate_env
from tests.support.swarm import running_swarm
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow

UPDATE_S = 4.0  # each update sleeps this long first (tests.support.faults): a window to roll out in
SLOW_UPDATES = update_delay_env(UPDATE_S)


def async_job(**kw) -> AgentJetJob:
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
        max_staleness=1,
        **kw,
    )


def begin_and_call(client: SwarmClient, k: int) -> str:
    """Begin an episode and make its one call; returns its uuid."""
    uuid, creds = client.begin_episode()
    creds.as_openai_client(max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "say"}], max_tokens=2, seed=k
    )
    return uuid


def play(client: SwarmClient, tag: str, tasks: str = "ab") -> list[str]:
    """One batch (two tasks, two episodes each, rewards 0 and 1); returns the episodes' uuids."""
    out = []
    for task in tasks:
        for k in range(2):
            uuid = begin_and_call(client, k)
            client.end_episode(Task(task_id=f"{tag}-{task}"), uuid, WorkflowOutput(reward=float(k)))
            out.append(uuid)
    return out


def versions(store, uuids) -> set[int]:
    """The policy versions that answered the episodes' calls (as the proxy logged them)."""
    return {c.policy_version for u in uuids for c in store.calls(u)}


def test_rollouts_go_on_during_updates_and_stale_episodes_are_dropped(tmp_path):
    """A whole batch rolls out while the first update is held open (a gate the test opens, not a timing window)."""
    gate = tmp_path / "update-gate"
    gate.touch()
    with running_swarm(tmp_path, **update_gate_env(gate)) as sw:
        client, store = sw.client(), sw.store()
        client.auto_sync_train_config_and_start_engine(async_job())
        held = [begin_and_call(client, k) for k in range(2)]  # begun and called at v0, ended after step 2
        first = play(client, "b0")
        wait_for(lambda: client.get_engine_status().updating, "the first update")
        status = client.get_engine_status()
        assert status.state == ExperimentState.ROLLING and status.global_step == 0
        during = play(client, "b1")  # the whole batch rolls out while step 1 trains
        status = client.get_engine_status()
        assert status.updating and status.global_step == 0  # still in the same update: nothing waited for it
        assert versions(store, first + during) == {0}  # every call of both batches answered by policy v0
        gate.unlink()
        wait_for(lambda: client.get_engine_status().global_step >= 2, "step 2")
        assert wait_for(lambda: not client.get_engine_status().updating or None, "the update to end") is not None
        for i, uuid in enumerate(held):  # its calls are 2 versions behind the policy now: too old for k=1
            client.end_episode(Task(task_id="b0-a"), uuid, WorkflowOutput(reward=float(i)))
        play(client, "b2")
        wait_for(lambda: client.get_engine_status().global_step >= 3, "step 3")
        steps = {s.step: s for s in store.steps()}
        assert steps[1].metrics["staleness/0"] == 4 and steps[1].metrics["staleness_max"] == 0
        assert steps[2].metrics["staleness/1"] == 4  # rolled out at v0, trained into v2
        assert steps[3].metrics["dropped_stale"] == 2
        assert steps[3].metrics["dropped_stale_share"] == pytest.approx(2 / 6)
        for uuid in held:
            ep = store.get_episode(uuid)
            assert ep.consumed_step is None and ep.untrainable and ep.untrainable_reason.startswith("stale: ")
        assert client.get_rollout_stat().totals["stale"] == 2
        assert versions(store, held) == {0}
        assert {store.get_episode(u).consumed_step for u in during} == {2}
        assert "tis_weight_mean" in steps[2].metrics  # the behaviour-policy correction is on in async mode


def test_sigkill_mid_async_update_trains_every_episode_once(tmp_path):
    gate = tmp_path / "update-gate"  # created once step 1 is done: the update of step 2 is held until the kill
    with running_swarm(tmp_path, trainer=False) as sw:
        sw.start_trainer(**update_gate_env(gate))
        client, store = sw.client(), sw.store()
        client.auto_sync_train_config_and_start_engine(async_job())
        ended = play(client, "b0")
        wait_for(lambda: client.get_engine_status().global_step >= 1, "step 1")  # checkpoint step_1 written
        gate.touch()
        ended += play(client, "b1")
        wait_for(lambda: client.get_engine_status().updating, "the update of step 2")
        ended += play(client, "b2")  # rolled out during the update that is about to die
        sw.trainer.kill()
        assert client.get_engine_status().global_step == 1
        gate.unlink()
        sw.start_trainer(**SLOW_UPDATES)
        wait_for(lambda: client.get_engine_status().global_step >= 3, "steps 2 and 3 after the restart", timeout=180)
        assert wait_for(lambda: not client.get_engine_status().updating or None, "the update to end") is not None
        eps = [store.get_episode(u) for u in ended]
        assert all(e.status == EpisodeStatus.ENDED and not e.untrainable for e in eps)
        assert sorted(e.consumed_step for e in eps) == [1] * 4 + [2] * 4 + [3] * 4  # each trained exactly once
        assert [s.step for s in store.steps()] == [1, 2, 3]
        assert client.get_engine_status().policy_version == 3


@pytest.mark.parametrize("backend, engine", [("verl", "embedded"), ("verl", "vllm")])
def test_the_verl_backend_refuses_async_training_with_the_reason(backend, engine):
    from ajet_trainer.errors import TrainerError
    from ajet_trainer.factory import open_session
    from ajet_trainer.options import TrainerOptions

    job = AgentJetJob(max_staleness=1, lora_rank=8)
    opts = TrainerOptions.from_config(db_url="sqlite://", backend=backend, engine=engine)
    with pytest.raises(TrainerError, match="max_staleness=1 .* embedded backend .* verl's trainer steps synchronously"):
        open_session(job, 0, None, opts)  # refused before anything is loaded (no store is touched)


def test_full_fine_tuning_on_vllm_refuses_async_training_unless_partial_rollouts_load_in_place():
    from ajet_trainer.errors import TrainerError
    from ajet_trainer.factory import open_session, refuse_unsupported_async
    from ajet_trainer.options import TrainerOptions

    opts = TrainerOptions.from_config(db_url="sqlite://", backend="embedded", engine="vllm")
    with pytest.raises(TrainerError, match="would reload the weights under calls in flight: train a LoRA adapter"):
        open_session(AgentJetJob(max_staleness=1), 0, None, opts)
    refuse_unsupported_async(AgentJetJob(max_staleness=1, lora_rank=8), opts)  # allowed
    refuse_unsupported_async(AgentJetJob(max_staleness=1, partial_rollouts=True), opts)

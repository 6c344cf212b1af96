"""Several LoRA experiments on one launch of vLLM servers (`vllm/shared_launches.py`, `vllm/adapters.py`): the registry
alone (capacity, rank, the last one out, a dead launch replaced), and two experiments of a real swarm on the
stand-in that speaks vLLM's HTTP API (tests/support/vllm_stub.py): one server, each experiment's adapters under its
own names from step 0, each unloading only its own."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import httpx
import pytest

from ajet import AgentJetJob, SwarmClient
from ajet.types import ExperimentState
from ajet_store import experiment_store
from ajet_store.placement import experiment_slug
from ajet_trainer.errors import TrainerError
from ajet_trainer.vllm.server import VllmSettings
from ajet_trainer.vllm.shared_launches import LaunchKey, SharedLaunches
from tests.support.episodes import play_batch
from tests.support.procs import STUB
from tests.support.rolling import wait_state, wait_step
from tests.support.swarm import running_swarm

STAND_IN = f"{sys.executable} {STUB} serve"


@dataclass
class FakeLaunch:
    """What the registry asks of a launch: whether it lives, and to stop."""

    live: bool = True
    stopped: bool = False

    def alive(self) -> bool:
        return self.live and not self.stopped

    def stop(self) -> None:
        self.stopped = True


def key(experiments: int = 2, **settings: object) -> LaunchKey:
    return LaunchKey.of("/models/base", VllmSettings(experiments=experiments, lora_rank=8, **settings), [None])


def test_one_launch_serves_up_to_its_experiments_and_the_last_one_out_stops_it():
    servers, launched = SharedLaunches(), []

    def launch() -> FakeLaunch:
        launched.append(FakeLaunch())
        return launched[-1]

    a, release_a = servers.attach("", key(), 8, launch)
    b, release_b = servers.attach("b", key(), 4, launch)  # a lower rank fits the slots of the first's
    assert a is b and len(launched) == 1
    with pytest.raises(TrainerError, match="serves 2 experiments.*--vllm-max-experiments"):
        servers.attach("c", key(), 8, launch)
    other, release_other = servers.attach("c", key(max_model_len=4096), 8, launch)  # launched otherwise: its own
    assert other is not a and len(launched) == 2
    release_a()
    assert not a.stopped
    release_b()
    assert a.stopped and not other.stopped  # the last one out
    release_other()
    assert servers.launches == {}


def test_a_higher_rank_is_refused_and_a_dead_launch_is_replaced():
    servers, launched = SharedLaunches(), []

    def launch() -> FakeLaunch:
        launched.append(FakeLaunch())
        return launched[-1]

    first, release_first = servers.attach("", key(), 12, launch)  # --max-lora-rank 16
    with pytest.raises(TrainerError, match="lora_rank=32 is above the shared launch's --max-lora-rank 16"):
        servers.attach("b", key(), 32, launch)
    servers.attach("b", key(), 16, launch)
    first.live = False  # every process exited: the experiment that boots next gets a new launch
    fresh, _release = servers.attach("c", key(), 8, launch)
    assert fresh is not first and len(launched) == 2
    release_first()  # an experiment of the dead launch leaves it: nothing of the new one changes
    assert not fresh.stopped


JOB = dict(
    project_name="v",
    model="builtin:tiny",
    batch_size=2,
    num_repeat=2,
    lr=1e-2,
    lora_rank=8,
    max_prompt_length=64,
    max_response_length=64,
    max_model_len=256,
    max_response_length_in_one_turn=8,
)


@pytest.mark.slow
def test_two_experiments_share_one_vllm_server_each_its_own_adapters(tmp_path):
    with running_swarm(tmp_path, name="s", engine="vllm", trainer_args=("--vllm-command", STAND_IN)) as sw:
        a, b = SwarmClient(sw.url, verbose=False), SwarmClient(sw.url, verbose=False)
        a.auto_sync_train_config_and_start_engine(AgentJetJob(experiment_name="a", **JOB))
        b.auto_sync_train_config_and_start_engine(AgentJetJob(experiment_name="b", **JOB))
        wait_state(a, ExperimentState.ROLLING, timeout=120)
        wait_state(b, ExperimentState.ROLLING, timeout=120)
        for batch in range(3):
            for client in (a, b) if batch != 1 else (a,):  # b trains twice, a three times
                step = client.get_engine_status().global_step
                play_batch(client, batch)
                wait_step(client, step + 1, sw)
        slug = experiment_slug("v/b")
        (engine_a,) = sw.store().engines()
        with experiment_store(sw.store(), "v/b") as second:
            (engine_b,) = second.engines()
        assert engine_a.base_url == engine_b.base_url  # one server
        assert (engine_a.model, engine_a.policy_version) == ("policy@default@3", 3)  # one rule: policy@<slug>@<N>
        assert (engine_b.model, engine_b.policy_version) == (f"policy@{slug}@2", 2)
        journal = httpx.get(engine_a.base_url.removesuffix("/v1") + "/stub/journal").json()
        ops = [(j["op"], j["name"]) for j in journal if j["op"] in ("load_lora_adapter", "unload_lora_adapter")]
        a_ops = [op for op in ops if "@" + slug not in op[1]]
        b_ops = [op for op in ops if "@" + slug in op[1]]
        loads = (
            ("load_lora_adapter", 0),
            ("load_lora_adapter", 1),
            ("load_lora_adapter", 2),
            ("unload_lora_adapter", 0),
        )
        a_ops_wanted = (*loads, ("load_lora_adapter", 3), ("unload_lora_adapter", 1))
        assert a_ops == [(op, f"policy@default@{n}") for op, n in a_ops_wanted]
        assert b_ops == [(op, f"policy@{slug}@{n}") for op, n in loads]
        chats = {j["model"] for j in journal if j["op"] == "chat"}
        assert "policy" not in chats  # every call named an adapter: none ran on the bare base
        assert {m for m in chats if slug in m} and {m for m in chats if slug not in m}

"""Asynchronous training (`max_staleness >= 1`) on `--engine vllm`, against the stand-in that speaks vLLM's HTTP API
(tests/support/vllm_stub.py): while the trainer updates, the state stays ROLLING and vLLM goes on serving the last
step's LoRA adapter; each step's adapter is loaded under a name of its own, and every call is logged with the version
of the adapter that answered it. Real vLLM runs it in tests/vllm_real/test_vllm_async.py."""

from __future__ import annotations

import sys

import httpx
import pytest

from ajet.types import ExperimentState
from ajet_trainer.vllm.server import served_adapter
from tests.e2e.test_async_training import async_job, play, versions
from tests.support.faults import update_gate_env
from tests.support.procs import STUB
from tests.support.swarm import running_swarm
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow

STAND_IN = f"{sys.executable} {STUB} serve"


def test_vllm_serves_the_last_adapter_during_an_asynchronous_update(tmp_path):
    gate = tmp_path / "update-gate"
    gate.touch()
    args = ("--vllm-command", STAND_IN)
    with running_swarm(tmp_path, name="a", engine="vllm", trainer_args=args, **update_gate_env(gate)) as sw:
        client, store = sw.client(), sw.store()
        client.auto_sync_train_config_and_start_engine(async_job(lora_rank=8))
        first = play(client, "b0")
        wait_for(lambda: client.get_engine_status().updating, "the first update")
        during = play(client, "b1")  # a whole batch while step 1 trains
        status = client.get_engine_status()
        assert status.state == ExperimentState.ROLLING and status.updating and status.global_step == 0
        assert versions(store, first + during) == {0}
        gate.unlink()
        wait_for(lambda: client.get_engine_status().global_step >= 2, "step 2")
        wait_for(lambda: not client.get_engine_status().updating or None, "the update to end")
        after = play(client, "b2")
        assert versions(store, after) == {2}
        (engine,) = store.engines()
        journal = httpx.get(engine.base_url.removesuffix("/v1") + "/stub/journal").json()
        models = [j["model"] for j in journal if j["op"] == "chat"]
        assert set(models[:8]) == {served_adapter(0)} and set(models[8:]) == {served_adapter(2)}
        loads = [j["name"] for j in journal if j["op"] == "load_lora_adapter"]
        assert loads[:3] == [served_adapter(n) for n in (0, 1, 2)]
        assert {store.get_episode(u).consumed_step for u in during} == {2}

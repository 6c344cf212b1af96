"""`--engine vllm` on CPU: launch arguments, health failures, and the LoRA / sleep choreography against a
stand-in that speaks vLLM's HTTP API (tests/support/vllm_stub.py started as `vllm serve`)."""

import sys
import time

import httpx
import pytest

from ajet import AgentJetJob
from ajet_trainer.engine.vllm import (
    VllmEngine,
    VllmSettings,
    launch_args,
    launch_env,
    replica_devices,
)
from ajet_trainer.errors import EngineStartError, TrainerError
from tests.support.episodes import play_batch
from tests.support.procs import STUB
from tests.support.swarm import running_swarm


def test_vllm_launch_arguments_and_env(monkeypatch):
    s = VllmSettings(max_lora_rank=16, max_model_len=4096, gpu_memory_utilization=0.5, enable_sleep_mode=True,
                     tool_call_parser="hermes", extra_args=("--seed", "1"))
    assert launch_args("/models/qwen", s, 8123) == [
        "vllm", "serve", "/models/qwen", "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "policy",
        "--enable-lora", "--max-lora-rank", "16", "--max-model-len", "4096", "--gpu-memory-utilization", "0.5",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--enable-sleep-mode", "--seed", "1"]
    assert launch_env()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    monkeypatch.setenv("AJET_VLLM_COMMAND", "python -m my_vllm serve")
    assert VllmSettings.from_env().command == ("python", "-m", "my_vllm", "serve")


def test_vllm_replica_gpu_groups():
    assert replica_devices(2, None) == [None, None]
    assert replica_devices(2, "0,1;2,3") == ["0,1", "2,3"]
    with pytest.raises(TrainerError, match="2 vLLM replicas but 3 GPU groups"):
        replica_devices(2, "0;1;2")


def test_vllm_start_failure_reports_the_log_tail(tmp_path):
    s = VllmSettings(command=(sys.executable, "-c", "print('RuntimeError: CUDA out of memory'); raise SystemExit(3)",
                              "serve"), health_timeout_s=30)
    with pytest.raises(EngineStartError, match="CUDA out of memory"):
        VllmEngine("/models/none", s, tmp_path / "vllm.log").start()
    hang = VllmSettings(command=(sys.executable, "-c", "import time; time.sleep(60)", "serve"), health_timeout_s=1.5)
    with pytest.raises(EngineStartError, match="not healthy after"):
        VllmEngine("/models/none", hang, tmp_path / "vllm2.log").start()


@pytest.mark.slow
def test_vllm_lora_hot_loading_and_sleep_choreography(tmp_path):
    with running_swarm(tmp_path, name="v", engine="vllm", AJET_VLLM_COMMAND=f"{sys.executable} {STUB} serve",
                       AJET_VLLM_SLEEP="1", AJET_VLLM_REPLICAS="2") as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(AgentJetJob(
            model="builtin:tiny", lora_rank=4, batch_size=2, num_repeat=2, lr=1e-2, max_prompt_length=64,
            max_response_length=64, max_model_len=256, max_response_length_in_one_turn=8))
        store = sw.store()
        for batch in range(3):
            play_batch(client, batch)
            deadline = time.monotonic() + 120
            while client.get_engine_status().global_step < batch + 1:
                assert time.monotonic() < deadline, sw.logs()
                time.sleep(0.2)
        deps = store.deployments()
        assert [(d.name, d.model, d.policy_version) for d in deps] == [("vllm-0", "policy@3", 3),
                                                                      ("vllm-1", "policy@3", 3)]
        chats = []
        for dep in deps:  # both replicas got the same choreography
            journal = httpx.get(dep.base_url.removesuffix("/v1") + "/stub/journal").json()
            control = [(j["op"], j.get("name")) for j in journal if j["op"] != "chat"]
            assert control == [("sleep", None), ("wake_up", None), ("load_lora_adapter", "policy@1"),
                               ("sleep", None), ("wake_up", None), ("load_lora_adapter", "policy@2"),
                               ("sleep", None), ("wake_up", None), ("load_lora_adapter", "policy@3"),
                               ("unload_lora_adapter", "policy@1")]
            chats.append([j["model"] for j in journal if j["op"] == "chat"])
        assert all(chats), "the proxy balanced episodes over both replicas"
        merged = sorted(m for c in chats for m in c)
        assert merged == ["policy"] * 4 + ["policy@1"] * 4 + ["policy@2"] * 4  # each batch on the newest adapter
        for step in (1, 2, 3):
            assert (sw.exp_dir / "adapters" / f"step_{step}" / "adapter_config.json").is_file()
        versions = [c.policy_version for e in store.episodes() for c in store.calls(e.uuid)]
        assert sorted(set(versions)) == [0, 1, 2]

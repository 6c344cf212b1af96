"""`ajet-trainer --engine vllm` with real vLLM: the trainer launches two vLLM engines, trains LoRA steps, hot-loads
each step's adapter into both, and the swarm keeps going when one vLLM engine is killed; and verl's real actor
(CPU platform) training beside one vLLM engine, each step's adapter hot-loaded into it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from ajet import AgentJetJob
from ajet.types import ExperimentState
from tests.support.episodes import play_batch
from tests.support.real_vllm import vllm_python
from tests.support.rolling import wait_state, wait_step
from tests.support.swarm import running_swarm

# minutes of vLLM start-up and training, beside another test file's processes on two cores
pytestmark = [pytest.mark.vllm_real, pytest.mark.slow, pytest.mark.timeout(900)]

JOB = dict(
    model="builtin:tiny",
    batch_size=2,
    num_repeat=2,
    lr=1e-2,
    max_prompt_length=64,
    max_response_length=64,
    max_model_len=256,
    max_response_length_in_one_turn=8,
)


def served(base_url: str) -> set[str]:
    return {m["id"] for m in httpx.get(base_url + "/models").json()["data"]}


def ipc_folders(exp_dir: Path) -> dict[str, Path]:
    """The folder of IPC sockets of each vLLM server the trainer runs for the experiment, by its record's name."""
    records = {p.stem: json.loads(p.read_text()) for p in exp_dir.rglob("vllm-*.pid")}
    return {name: Path(r["ipc_dir"]) for name, r in records.items() if r.get("ipc_dir")}


def kill_replica(port: int) -> None:
    """SIGKILL the vLLM server on `port` and its engine processes, as a crashed node would go."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in " ".join(cmd) and str(port) in cmd:
            for p in [*proc.children(recursive=True), proc]:
                p.send_signal(signal.SIGKILL)
            return
    raise AssertionError(f"no vLLM server on port {port}")


def test_lora_steps_on_two_real_replicas_survive_a_killed_one(tmp_path):
    vllm_python()
    with running_swarm(tmp_path, name="v", engine="vllm", trainer_args=("--vllm-engines", "2", "--vllm-sleep")) as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(AgentJetJob(lora_rank=8, **JOB))
        wait_state(client, ExperimentState.ROLLING, timeout=600)
        store = sw.store()
        for batch in (0, 1):
            play_batch(client, batch)
            wait_step(client, batch + 1, sw, timeout=180)
        deps = store.engines()
        assert [(d.name, d.model, d.policy_version) for d in deps] == [
            ("vllm-0", "policy@default@2", 2),
            ("vllm-1", "policy@default@2", 2),
        ]
        assert all(served(d.base_url) == {"policy", "judge", "policy@default@1", "policy@default@2"} for d in deps)
        used = {c.engine for e in store.episodes() for c in store.calls(e.uuid)}
        assert used == {"vllm-0", "vllm-1"}, "the proxy balanced episodes over both vLLM engines"

        folders = ipc_folders(sw.exp_dir)  # issue 65: vLLM's sockets in a folder of each server's, not in /tmp
        assert len(folders) == 2 and all(any(f.iterdir()) for f in folders.values()), folders
        killed = int(deps[1].base_url.rsplit(":", 1)[1].split("/")[0])
        kill_replica(killed)
        play_batch(client, 2)  # every episode completes: the proxy fails over to vllm-0
        wait_step(client, 3, sw, timeout=180)
        play_batch(client, 3)
        wait_step(client, 4, sw, timeout=180)
        deps = store.engines()
        assert [(d.name, d.model) for d in deps] == [("vllm-0", "policy@default@4")]  # the dead engine withdrawn
        assert served(deps[0].base_url) == {
            "policy",
            "judge",
            "policy@default@3",
            "policy@default@4",
        }  # steps 1 and 2's unloaded
        log = sw.trainer.log_tail(10**6)
        assert "vLLM engine vllm-1 exited" in log
        gone = [folder for name, folder in folders.items() if name not in ipc_folders(sw.exp_dir)]
        assert len(gone) == 1 and not gone[0].exists()  # the killed server's sockets went with its records
        assert "sleep mode needs CUDA" in log  # asked for on CPU: said, and vLLM stays awake

        calls = sorted((c for e in store.episodes() for c in store.calls(e.uuid)), key=lambda c: c.policy_version)
        assert [c.policy_version for c in calls] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4  # each on the newest
        assert all(c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in calls)
        assert {c.engine for c in calls if c.policy_version == 3} == {"vllm-0"}
        for step in (1, 2, 3, 4):
            assert (sw.exp_dir / "adapters" / f"step_{step}" / "adapter_config.json").is_file()


def test_verl_actor_trains_beside_real_vllm_with_lora_hot_loading(tmp_path):
    vllm_python()
    with running_swarm(tmp_path, name="vv", engine="vllm", backend="verl") as sw:
        client = sw.client()
        client.auto_sync_train_config_and_start_engine(AgentJetJob(lora_rank=8, n_gpu=1, **JOB))
        wait_state(client, ExperimentState.ROLLING, timeout=600)
        store = sw.store()
        for batch in (0, 1):
            play_batch(client, batch)
            wait_step(client, batch + 1, sw, timeout=180)
        (dep,) = store.engines()
        assert (dep.name, dep.model, dep.policy_version) == ("vllm-0", "policy@default@2", 2)
        assert served(dep.base_url) == {"policy", "judge", "policy@default@1", "policy@default@2"}  # verl's, hot-loaded
        steps = store.steps()
        assert [s.step for s in steps] == [1, 2] and all(s.metrics["grad_norm"] > 0 for s in steps)
        assert "verl's actor beside the vllm engine (cpu: True)" in sw.trainer.log_tail(10**6)
        calls = sorted((c for e in store.episodes() for c in store.calls(e.uuid)), key=lambda c: c.policy_version)
        assert [c.policy_version for c in calls] == [0] * 4 + [1] * 4  # each batch on the newest adapter

"""`--backend verl` end to end on CPU: proxy, SDK client and the trainer daemon driving verl's trainer.

Real: the proxy (uvicorn), the store (SQLite), the SDK, the daemon's state machine, `open_session` ->
`open_verl_session` (config composition, `StoreFedTrainer`, restore, store reconciliation), verl's
`fit_step`, the step records, registered engines and the final checkpoint. Stood in for (they need a GPU):
verl's FSDP actor workers (`CpuActorGroup`: the tiny model trained on CPU with verl's loss) and verl's
vLLM engine (the vLLM stand-in, slept and woken over HTTP by `HttpEngines`). `scripts/gpu_smoke.sh`
runs this path with the real ones.
"""

import threading
import time

import httpx
import pytest

from ajet import AgentJetJob, SwarmClient
from ajet_store import Store, sqlite_url
from ajet_trainer.daemon import TrainerDaemon
from ajet_trainer.options import TrainerOptions
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.verl import launch as verl_launch
from ajet_trainer.verl.trainer import StoreFedTrainer
from tests.support.episodes import play_batch
from tests.support.procs import start_proxy, start_stub
from tests.support.verl_stand_in import CpuActorGroup, HttpEngines

pytestmark = pytest.mark.slow


def _wait(cond, what, thread, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert thread.is_alive(), f"the trainer daemon died waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_verl_backend_daemon_end_to_end(tmp_path, monkeypatch):
    model_path = str(builtin_model_path("builtin:tiny"))
    stub = start_stub(
        tmp_path, "serve", "--model", model_path, "--served-model-name", model_path
    )  # verl names it by path
    url = sqlite_url(tmp_path / "v.db")
    px = start_proxy(tmp_path, url)
    model, _ = load_policy(model_path, AgentJetJob(), "cpu")
    actor, engines = CpuActorGroup(model), HttpEngines([stub.url.removeprefix("http://")])

    def init_workers(self):  # what verl's init_workers leaves behind, with the GPU parts stood in for
        self.actor_rollout_wg, self.checkpoint_manager = actor, engines
        self.llm_server_manager = engines
        self.checkpoint_manager.sleep_replicas()

    monkeypatch.setattr(verl_launch, "_ray_init", lambda address, workers, cpu=False: False)
    monkeypatch.setattr(StoreFedTrainer, "init_workers", init_workers)
    stop = threading.Event()
    daemon = TrainerDaemon(
        TrainerOptions.from_config(
            db_url=url, backend="verl", engine="hybrid", experiment_dir=str(tmp_path / "exp"), poll_s=0.05
        )
    )
    thread = threading.Thread(target=daemon.run, args=(stop,), daemon=True)
    thread.start()
    store = Store(url)
    try:
        client = SwarmClient(px.url)
        client.auto_sync_train_config_and_start_engine(
            AgentJetJob(
                model="builtin:tiny",
                n_gpu=1,
                batch_size=2,
                num_repeat=2,
                lr=1e-3,
                save_freq=2,
                max_prompt_length=64,
                max_response_length=64,
                max_model_len=256,
                max_response_length_in_one_turn=8,
            )
        )
        for batch in range(3):
            play_batch(client, batch)
            _wait(lambda b=batch: client.get_engine_status().global_step >= b + 1, f"step {batch + 1}", thread)
        assert [(d.name, d.base_url, d.model, d.policy_version) for d in store.engines()] == [
            ("verl-vllm-0", stub.url + "/v1", model_path, 3)
        ]
        journal = httpx.get(stub.url + "/stub/journal").json()
        ops = [j["op"] for j in journal if j["op"] != "chat"]
        assert ops == ["sleep", "wake_up"] + ["sleep", "wake_up"] * 3  # boot, then every step
        assert {j["model"] for j in journal if j["op"] == "chat"} == {model_path}
        assert len(actor.seen) == 3 and all(s["advantages"].abs().sum() > 0 for s in actor.seen)
        versions = [c.policy_version for e in store.episodes() for c in store.calls(e.uuid)]
        assert sorted(set(versions)) == [0, 1, 2]  # each batch sampled from the newest weights
        assert [s.step for s in store.steps()] == [1, 2, 3]
        client.stop_engine()
        _wait(lambda: daemon.session is None, "teardown", thread)
        # verl saved step 2 (save_freq); stopping saved step 3; each carries its step's record
        ckpts = tmp_path / "exp" / "verl_checkpoints"
        assert sorted(p.name for p in ckpts.glob("global_step_*")) == ["global_step_2", "global_step_3"]
        assert (ckpts / "latest_checkpointed_iteration.txt").read_text() == "3"
    finally:
        stop.set()
        thread.join(60)
        store.close()
        px.close()
        stub.close()

"""The README's multi-node recipe, run: a Ray cluster of two nodes on this machine (Ray's own `Cluster`: a head and a
worker node, one CPU each, on loopback), `ajet-trainer start --backend verl --ray-address ... --nnodes 2`, verl's
FSDP actor with one rank on each node (gloo), two GRPO steps through the swarm, then a restart of the trainer
from verl's checkpoint and a third step (issue 31, item 3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ajet import AgentJetJob, SwarmClient
from ajet_store import Store, sqlite_url
from tests.support.episodes import play_batch
from tests.support.procs import offline_env, start_proxy, stop_session

pytestmark = pytest.mark.slow


def _trainer(tmp: Path, db: str, address: str, log_name: str) -> subprocess.Popen:
    log = open(tmp / log_name, "ab")
    args = [sys.executable, "-m", "ajet_trainer.cli", "start", "--db", db, "--backend", "verl", "--engine", "embedded",
            "--device", "cpu", "--ray-address", address, "--nnodes", "2", "--experiment-dir", str(tmp / "exp"),
            "--log-level", "info"]  # fmt: skip
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=offline_env(), start_new_session=True)


def _wait(cond, what: str, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            state = "exited" if proc.poll() is not None else "timed out"
            pytest.fail(f"waiting for {what}: trainer {state}\n{log.read_text(errors='replace')[-6000:]}")
        time.sleep(0.3)


def _cpus(address: str) -> tuple[int, float, float]:
    """(live nodes, CPUs in the cluster, CPUs free) from a Ray driver of its own: with one CPU a node and one CPU a
    rank, no CPU free means a rank on each node."""
    code = (
        "import ray, json; ray.init(address=%r, logging_level='ERROR');"
        "print(json.dumps([sum(n['Alive'] for n in ray.nodes()), ray.cluster_resources().get('CPU', 0),"
        " ray.available_resources().get('CPU', 0)]))" % address
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=offline_env())
    assert res.returncode == 0, res.stderr[-3000:]
    nodes, total, free = json.loads(res.stdout.strip().splitlines()[-1])
    return int(nodes), float(total), float(free)


def test_verl_trains_across_two_ray_nodes_and_restarts_from_its_checkpoint(tmp_path: Path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    db = sqlite_url(tmp_path / "nodes.db")
    px = start_proxy(tmp_path, db)
    trainer = _trainer(tmp_path, db, cluster.address, "trainer.log")
    store = Store(db)
    try:
        client = SwarmClient(px.url, verbose=False)
        job = AgentJetJob(model="builtin:tiny", n_gpu=1, batch_size=2, num_repeat=2, lr=5e-3, save_freq=1,
                          max_prompt_length=64, max_response_length=64, max_model_len=256,
                          max_response_length_in_one_turn=8, experiment_name="two-nodes")  # fmt: skip
        client.auto_sync_train_config_and_start_engine(job)
        log = tmp_path / "trainer.log"
        _wait(lambda: client.get_engine_status().state.value == "ROLLING", "boot", trainer, log)
        assert _cpus(cluster.address) == (2, 2.0, 0.0)  # two nodes of one CPU, each held by a rank of verl's actor
        for batch in range(2):
            play_batch(client, batch)
            _wait(lambda b=batch: client.get_engine_status().global_step >= b + 1, f"step {batch + 1}", trainer, log)
        assert [s.step for s in store.steps()] == [1, 2]
        assert all(s.metrics["grad_norm"] > 0 for s in store.steps())

        os.killpg(trainer.pid, signal.SIGKILL)  # the cluster stays; the trainer comes back to it
        trainer.wait(30)
        old_url = store.engines()[0].base_url
        trainer = _trainer(tmp_path, db, cluster.address, "trainer2.log")
        log = tmp_path / "trainer2.log"
        _wait(lambda: store.engines()[0].base_url != old_url, "the restarted engine", trainer, log)
        assert client.get_engine_status().global_step == 2  # restored from verl's checkpoint of step 2
        play_batch(client, 2)
        _wait(lambda: client.get_engine_status().global_step >= 3, "step 3", trainer, log)
        assert [s.step for s in store.steps()] == [1, 2, 3]
        assert sorted(e.consumed_step for e in store.episodes()) == [1] * 4 + [2] * 4 + [3] * 4
        client.stop_engine()
    finally:
        stop_session(trainer)
        store.close()
        px.close()
        cluster.shutdown()

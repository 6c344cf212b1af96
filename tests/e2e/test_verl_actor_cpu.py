"""`--backend verl` with verl's real actor on CPU, beside the embedded engine: no stand-in.

Real: the proxy (uvicorn), the store (SQLite), the SDK client, the trainer daemon, verl's driver
(`StoreFedTrainer.fit_step`), Ray (local, one CPU worker), verl's `ActorRolloutRefWorker` with its FSDP2
engine on verl's CPU platform (gloo), verl's checkpoints and model merger (`export-model`); the embedded
engine answers the agents' calls with the weights pulled from verl's actor after each step.
"""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import torch

from ajet import AgentJetJob, SwarmClient
from ajet_store import Store, sqlite_url
from tests.support.episodes import play_batch
from tests.support.exports import assert_export_matches_the_served_policy
from tests.support.procs import offline_env, start_proxy, stop_session

pytestmark = pytest.mark.slow

PROMPT = [{"role": "user", "content": "say a"}]


def _job(lora_rank: int) -> AgentJetJob:
    return AgentJetJob(
        model="builtin:tiny",
        n_gpu=1,
        batch_size=2,
        num_repeat=2,
        lr=5e-3,
        save_freq=1,
        lora_rank=lora_rank,
        lora_alpha=16,
        max_prompt_length=64,
        max_response_length=64,
        max_model_len=256,
        max_response_length_in_one_turn=8,
        experiment_name=f"verl-cpu-{lora_rank}",
    )


def _start_trainer(tmp_path, url, log_name):
    log = open(tmp_path / log_name, "ab")
    # a session of its own: the SIGKILL below takes Ray's processes (started by the trainer) with it
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ajet_trainer.cli",
            "start",
            "--db",
            url,
            "--backend",
            "verl",
            "--engine",
            "embedded",
            "--device",
            "cpu",
            "--log-level",
            "info",
            "--experiment-dir",
            str(tmp_path / "exp"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=offline_env(),
        start_new_session=True,
    )


def _wait(cond, what, proc, tmp_path, log_name, timeout=240.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (tmp_path / log_name).read_text(errors="replace")[-6000:]
            pytest.fail(f"waiting for {what}: trainer {'exited' if proc.poll() is not None else 'timed out'}\n{tail}")
        time.sleep(0.2)


def _served_logprobs(store: Store) -> list[float]:
    """Greedy log-probs of the first tokens the served policy gives one fixed prompt (straight to the engine)."""
    dep = store.engines()[0]
    r = httpx.post(
        f"{dep.base_url}/chat/completions",
        timeout=60,
        headers={"Authorization": f"Bearer {dep.api_key}"} if dep.api_key else {},
        json={"model": dep.model, "messages": PROMPT, "max_tokens": 4, "temperature": 0.0, "logprobs": True},
    )
    r.raise_for_status()
    return [t["logprob"] for t in r.json()["choices"][0]["logprobs"]["content"]]


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_verl_actor_on_cpu_trains_beside_the_embedded_engine_and_restores_after_sigkill(tmp_path, lora_rank):
    url = sqlite_url(tmp_path / "v.db")
    px = start_proxy(tmp_path, url)
    trainer = _start_trainer(tmp_path, url, "trainer.log")
    store = Store(url)
    try:
        client = SwarmClient(px.url)
        client.auto_sync_train_config_and_start_engine(_job(lora_rank))
        _wait(lambda: client.get_engine_status().state.value == "ROLLING", "boot", trainer, tmp_path, "trainer.log")
        before = _served_logprobs(store)
        for batch in range(2):
            play_batch(client, batch)
            _wait(
                lambda b=batch: client.get_engine_status().global_step >= b + 1,
                f"step {batch + 1}",
                trainer,
                tmp_path,
                "trainer.log",
            )
        after = _served_logprobs(store)
        assert before != after  # the served policy is the one verl's actor trained
        steps = store.steps()
        assert [s.step for s in steps] == [1, 2]
        for s in steps:
            assert torch.isfinite(torch.tensor([s.metrics["loss"], s.metrics["grad_norm"]])).all(), s.metrics
            assert s.metrics["grad_norm"] > 0
        consumed = [e.consumed_step for e in store.episodes()]
        assert sorted(consumed) == [1, 1, 1, 1, 2, 2, 2, 2]  # each episode trained exactly once
        ckpts = tmp_path / "exp" / "verl_checkpoints"
        assert (ckpts / "latest_checkpointed_iteration.txt").read_text() == "2"
        # verl's checkpoint of step 2 exports as the embedded backend's do, and is the served policy
        assert_export_matches_the_served_policy(client, store, tmp_path / "exp", lora_rank)

        os.killpg(trainer.pid, signal.SIGKILL)  # no goodbye: the restart restores verl's checkpoint
        trainer.wait(30)
        old_url = store.engines()[0].base_url
        trainer = _start_trainer(tmp_path, url, "trainer2.log")
        _wait(
            # a booting trainer withdraws the old engine before it registers its own: none is there a moment
            lambda: any(d.base_url != old_url for d in store.engines()),
            "the restarted engine",
            trainer,
            tmp_path,
            "trainer2.log",
        )
        assert client.get_engine_status().global_step == 2
        assert _served_logprobs(store) == pytest.approx(after, abs=1e-5)  # the restored weights are served
        play_batch(client, 2)
        _wait(lambda: client.get_engine_status().global_step >= 3, "step 3", trainer, tmp_path, "trainer2.log")
        assert [s.step for s in store.steps()] == [1, 2, 3]
        client.stop_engine()
    finally:
        stop_session(trainer)
        store.close()
        px.close()

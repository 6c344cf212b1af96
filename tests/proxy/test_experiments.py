"""One proxy serves each experiment of its swarm (`experiment_host.py`): an experiment the first store lists is
taken up, a control call acts on the experiment its `X-Ajet-Experiment` header names, an episode's calls go to its
experiment's engines under its adapter's name and into its store, and one experiment's stop leaves the others
rolling. The second experiment is made as the trainer makes one: its store beside the first, booted there."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import httpx
import openai
import pytest

from ajet import AgentJetJob, ExperimentNotFound, SwarmClient, Task, WorkflowOutput
from ajet.errors import JobConflict
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import Store, experiment_store, sqlite_url
from ajet_store.placement import experiment_slug
from ajet_trainer.factory import trains_alone
from ajet_trainer.options import TrainerOptions
from tests.support.procs import start_proxy, start_stub
from tests.support.rolling import ensure_rolling, rolling_beside, wait_state

ASK = [{"role": "user", "content": "say a"}]


@pytest.fixture(scope="module")
def swarm(module_tmp) -> Iterator[tuple[str, str, Store, Store]]:
    """(proxy URL, stub URL, the first store, experiment p/b's store): both experiments ROLLING on one stub."""
    stub = start_stub(module_tmp)
    url = sqlite_url(module_tmp / "swarm.db")
    first = Store(url)
    proxy = start_proxy(module_tmp, url)
    client = SwarmClient(proxy.url, verbose=False)
    ensure_rolling(client, first, stub.url)
    second = rolling_beside(first, stub.url, batch_size=1, num_repeat=1)
    try:
        yield proxy.url, stub.url, first, second
    finally:
        client.close()
        proxy.close()
        stub.close()
        second.close()
        first.close()


def models_sent(stub_url: str) -> list[str]:
    journal = httpx.get(stub_url + "/stub/journal").json()
    return [e["model"] for e in journal if e["op"] == "chat"]


def test_each_experiments_calls_go_to_its_adapter_and_into_its_store(swarm):
    proxy_url, stub_url, first, second = swarm
    a, b = SwarmClient(proxy_url, verbose=False), SwarmClient(proxy_url, experiment="p/b", verbose=False)
    try:
        wait_state(b, ExperimentState.ROLLING)
        uuid_a, creds_a = a.begin_episode()
        uuid_b, creds_b = b.begin_episode()
        before = len(models_sent(stub_url))
        creds_b.as_openai_client().chat.completions.create(model="x", messages=ASK, max_tokens=4)
        creds_a.as_openai_client().chat.completions.create(model="x", messages=ASK, max_tokens=4)
        assert models_sent(stub_url)[before:] == ["policy@b", "stub-model"]
        assert [c.seq for c in second.calls(uuid_b)] == [0] and first.calls(uuid_b) == []
        assert [c.seq for c in first.calls(uuid_a)] == [0] and second.calls(uuid_a) == []
        served = creds_b.as_openai_client().models.list()
        assert [m.id for m in served.data] == ["policy", "policy@b"]
        b.end_episode(Task(task_id="t"), uuid_b, WorkflowOutput(reward=1.0))
        a.end_episode(Task(task_id="t"), uuid_a, WorkflowOutput(reward=0.0))
        assert second.get_episode(uuid_b).status is EpisodeStatus.ENDED and second.get_episode(uuid_b).reward == 1.0
        assert first.get_episode(uuid_a).reward == 0.0
        assert b.get_rollout_stat().totals["ended"] == 1 and b.get_engine_status().experiment_name == "b"
    finally:
        a.close()
        b.close()


def test_a_key_works_only_in_its_own_experiment_and_a_stop_is_the_callers(swarm):
    proxy_url, _stub_url, first, second = swarm
    a, b = SwarmClient(proxy_url, verbose=False), SwarmClient(proxy_url, experiment="p/b", verbose=False)
    try:
        uuid_b, _creds = b.begin_episode()
        assert a.can_continue_episode(uuid_b) is False  # the default experiment has no such episode
        assert b.can_continue_episode(uuid_b) is True
        b.stop_engine()
        assert second.experiment().state is ExperimentState.OFFLINE
        assert second.get_episode(uuid_b).status is EpisodeStatus.ABORTED
        assert a.get_engine_status().state is ExperimentState.ROLLING
        assert first.experiment().state is ExperimentState.ROLLING
    finally:
        a.close()
        b.close()


def test_an_experiment_the_swarm_does_not_have_is_404_naming_it(swarm):
    proxy_url = swarm[0]
    with SwarmClient(proxy_url, experiment="p/nope", verbose=False) as c:
        with pytest.raises(ExperimentNotFound, match="p/nope"):
            c.get_engine_status()
        with pytest.raises(ExperimentNotFound, match="p/nope"):  # the episode routes look it up off the event loop
            c.begin_episode()


@pytest.fixture
def lora_swarm(tmp_path) -> Iterator[tuple[Store, AgentJetJob, SwarmClient, SwarmClient, str]]:
    """(the first store, its LoRA job p/a, its client a ROLLING it, a second client c, the store's URL) on a stub."""
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "swarm.db")
    first, proxy = Store(url), start_proxy(tmp_path, url)
    lora = AgentJetJob(project_name="p", experiment_name="a", lora_rank=8, batch_size=1, num_repeat=1)
    a, c = SwarmClient(proxy.url, verbose=False), SwarmClient(proxy.url, verbose=False)
    try:
        ensure_rolling(a, first, stub.url, lora)
        yield first, lora, a, c, url
    finally:
        a.close()
        c.close()
        proxy.close()
        stub.close()
        first.close()


def test_a_job_of_a_new_name_runs_beside_when_what_is_shared_agrees(lora_swarm):
    """A LoRA job of another name syncs into an experiment of its own while the first runs; a job that differs in
    what the swarm shares, or fine-tunes the whole model, gets a 409 naming why, and nothing is listed."""
    first, lora, a, c, _url = lora_swarm
    share = lora.model_copy(update={"experiment_name": "c", "gpu_memory_utilization": 0.5})
    with pytest.raises(JobConflict, match=r"gpu_memory_utilization \(the engines' share"):
        c.auto_sync_train_config_and_start_engine(share)
    with pytest.raises(JobConflict, match="full fine-tuning"):
        c.auto_sync_train_config_and_start_engine(lora.model_copy(update={"experiment_name": "c", "lora_rank": 0}))
    assert first.experiment_entries() == [] and c.experiment is None
    job_c = lora.model_copy(update={"experiment_name": "c", "lora_rank": 16, "batch_size": 4})
    assert c.auto_sync_train_config_and_start_engine(job_c) == ExperimentState.BOOTING
    assert [e.name for e in first.experiment_entries()] == ["p/c"] and c.experiment == "p/c"
    assert c.get_engine_status().experiment_name == "c" and a.get_engine_status().experiment_name == "a"
    assert first.experiment().state == ExperimentState.ROLLING  # the first runs on, untouched
    with experiment_store(first, "p/c") as store_c:
        assert store_c.experiment().job.batch_size == 4 and store_c.experiment().state == ExperimentState.BOOTING
    assert c.auto_sync_train_config_and_start_engine(job_c) == ExperimentState.BOOTING  # joins its own


def test_a_sync_that_would_start_a_second_experiment_is_refused_where_the_trainer_trains_one(lora_swarm):
    """A trainer on verl (or vLLM in sleep mode) says at its claim of the store that it trains one experiment, and
    why; a sync that would start a second gets a 409 naming that reason, and nothing is listed. A trainer that trains
    several (the embedded one) claiming the store after it lets the same sync through."""
    first, lora, a, c, url = lora_swarm
    verl = trains_alone(TrainerOptions.from_config(db_url=url, backend="verl"))
    assert verl is not None and "verl #7909" in verl
    first.claim_trainer(os.getpid(), lambda _pid: True, verl)
    job_c = lora.model_copy(update={"experiment_name": "c"})
    with pytest.raises(JobConflict, match=r"p/c cannot run beside p/a .*--backend verl, which trains one adapter"):
        c.auto_sync_train_config_and_start_engine(job_c)
    assert first.experiment_entries() == [] and first.experiment().state == ExperimentState.ROLLING
    first.claim_trainer(os.getpid(), lambda _pid: True, trains_alone(TrainerOptions.from_config(db_url=url)))
    assert c.auto_sync_train_config_and_start_engine(job_c) == ExperimentState.BOOTING
    assert [e.name for e in first.experiment_entries()] == ["p/c"]


def test_the_swarm_lists_its_experiments_and_stops_them_all_only_when_asked(tmp_path):
    """`list_experiments` names each experiment with its state, the first first; `stop_engine` stops the caller's
    alone; `ajet-swarm stop` (the SDK's `stop_swarm`) stops every one, and their episode keys stop working."""
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "swarm.db")
    first, proxy = Store(url), start_proxy(tmp_path, url)
    a, b = SwarmClient(proxy.url, verbose=False), SwarmClient(proxy.url, experiment="p/b", verbose=False)
    ensure_rolling(a, first, stub.url, AgentJetJob(project_name="p", experiment_name="a", lora_rank=8))
    second = rolling_beside(first, stub.url, lora_rank=8)
    try:
        wait_state(b, ExperimentState.ROLLING)
        listed = a.list_experiments()
        assert [(e.name, e.slug, e.default, e.status.state) for e in listed] == [
            ("p/a", "default", True, ExperimentState.ROLLING),
            ("p/b", experiment_slug("p/b"), False, ExperimentState.ROLLING),
        ]
        _uuid, creds = b.begin_episode()
        assert a.stop_engine() == ExperimentState.OFFLINE and second.experiment().state == ExperimentState.ROLLING
        res = subprocess.run([sys.executable, "-m", "ajet_swarm.cli", "stop", "--swarm-url", proxy.url],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == ["p/a [default]: OFFLINE, step 0", "p/b: OFFLINE, step 0"]
        assert second.experiment().state == ExperimentState.OFFLINE
        with pytest.raises(openai.AuthenticationError):
            creds.as_openai_client().chat.completions.create(model="x", messages=ASK, max_tokens=4)
    finally:
        a.close()
        b.close()
        proxy.close()
        stub.close()
        second.close()
        first.close()

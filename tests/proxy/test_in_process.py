"""The control API through the SDK against a proxy app served in this process (`tests.support.in_process`): the
in-process lane (`make test-fast`) exercises the state machine and the episode life cycle without a socket."""

from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from ajet import AgentJetJob, EpisodeConflict, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus, ExperimentState
from ajet_proxy.app import create_app
from ajet_proxy.config import ProxyConfig
from ajet_store import Store, sqlite_url
from tests.support.in_process import URL, proxy_in_process
from tests.support.rolling import make_rolling


def test_the_state_machine_and_an_episode_in_process(tmp_path):
    with proxy_in_process(tmp_path) as (client, store):
        assert client.get_engine_status().state == ExperimentState.OFFLINE
        client.sync_train_config(AgentJetJob(batch_size=1, num_repeat=1, experiment_name="in-process"))
        assert client.start_engine() == ExperimentState.BOOTING
        make_rolling(store, "http://127.0.0.1:9")  # an engine nobody calls: the episode makes no LLM call
        assert client.get_engine_status().state == ExperimentState.ROLLING
        uuid, creds = client.begin_episode()
        assert creds.api_key and store.get_episode(uuid).status == EpisodeStatus.OPEN
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=0.5))
        ep = store.get_episode(uuid)
        assert ep.status == EpisodeStatus.ENDED and ep.reward == 0.5 and ep.untrainable  # no call: never trained
        with pytest.raises(EpisodeConflict):
            client.abort_episode(uuid)
        assert client.stop_engine() == ExperimentState.OFFLINE


def test_a_job_built_from_a_base_yaml_syncs_where_the_yaml_is_not(tmp_path):
    """The client merges its base YAML; the proxy, on another machine, must not look for the file."""
    base = tmp_path / "client-only.yaml"
    base.write_text("batch_size: 5\nnum_repeat: 3\n")
    job = AgentJetJob(base_yaml_config=str(base))
    base.unlink()
    with proxy_in_process(tmp_path) as (client, store):
        client.sync_train_config(job)
        synced = store.experiment().job
        assert (synced.batch_size, synced.num_repeat, synced.base_yaml_config) == (5, 3, str(base))


def test_an_open_episodes_call_is_refused_on_the_stored_state_not_a_lagging_view(tmp_path):
    """Another proxy worker may begin an episode on a ROLLING this worker has not polled yet (the chaos soak's
    "503 WEIGHT_SYNCING" calls, each leaving its episode open until the drain timed out): a call is refused outside
    ROLLING on the state the store holds, read again before refusing."""
    url = sqlite_url(tmp_path / "lag.db")
    app = create_app(ProxyConfig.from_config(db_url=url))
    with TestClient(app, base_url=URL) as http:
        client, store = SwarmClient(URL, http_client=http, verbose=False, max_retries=0), Store(url)
        try:
            client.sync_train_config(AgentJetJob(batch_size=1, num_repeat=1, experiment_name="lag"))
            client.start_engine()
            make_rolling(store, "http://127.0.0.1:9")  # an engine nobody answers at: the call fails there, not here
            _uuid, creds = client.begin_episode()
            host = app.state.ajet.default
            host.experiment = replace(host.experiment, state=ExperimentState.WEIGHT_SYNCING)  # a view that lags
            call = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            auth = {"Authorization": f"Bearer {creds.api_key}"}
            went_on = http.post("/v1/chat/completions", json=call, headers=auth)
            assert went_on.json()["error"].get("code") != "NotReady", went_on.text
            store.transition(ExperimentState.WEIGHT_SYNCING)  # the store's own state, seen: refused
            assert client.get_engine_status().state == ExperimentState.WEIGHT_SYNCING
            refused = http.post("/v1/chat/completions", json=call, headers=auth)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "NotReady", refused.text
        finally:
            client.close()
            store.close()


def test_a_worker_that_has_not_seen_the_default_experiments_name_yet_finds_it_in_the_store(tmp_path):
    """Two workers on one store: a client's sync through one names the swarm's default experiment; a control call for
    it through the other, whose view of the default experiment predates the sync, is served, not 404."""
    url = sqlite_url(tmp_path / "names.db")
    job = AgentJetJob(batch_size=1, num_repeat=1, project_name="p", experiment_name="named")
    second = create_app(ProxyConfig.from_config(db_url=url))
    with TestClient(create_app(ProxyConfig.from_config(db_url=url)), base_url=URL) as http_a:
        with TestClient(second, base_url=URL) as http_b:
            syncing = SwarmClient(URL, http_client=http_a, verbose=False, max_retries=0)
            syncing.sync_train_config(job)
            host = second.state.ajet.default
            host.experiment = replace(host.experiment, job=None)  # its view from before the sync
            other = SwarmClient(URL, http_client=http_b, verbose=False, max_retries=0, experiment="p/named")
            assert other.get_engine_status().state == ExperimentState.OFFLINE  # found, not ExperimentNotFound
            syncing.close()
            other.close()

"""The control API through the SDK against a proxy app served in this process (`tests.support.in_process`): the
in-process lane (`make test-fast`) exercises the state machine and the episode life cycle without a socket."""

import pytest

from ajet import AgentJetJob, EpisodeConflict, Task, WorkflowOutput
from ajet.types import EpisodeStatus, ExperimentState
from tests.support.in_process import proxy_in_process
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

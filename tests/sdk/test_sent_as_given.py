"""Issue 65: the SDK sends what it was given or refuses it. `end_episode(Task(metadata={"\\ud800k": "v"}))` was
accepted and stored with the key rewritten as `"\\ufffd\\ufffd\\ufffdk"` (JSON-mode dumping rewrote it before the server
saw it), and a lone surrogate in a value crashed the encoder. Every body is now checked by the wire model the server
validates it with, and a value travels as given (JSON's escapes where UTF-8 cannot hold it)."""

from __future__ import annotations

import math

import pytest

from ajet import AgentJetJob, InvalidRequest, SwarmClient, Task, WorkflowOutput
from ajet_store.types import RegisteredEngine
from tests.support.in_process import proxy_in_process
from tests.support.rolling import make_rolling

NOWHERE = "http://127.0.0.1:9"
"""Nothing listens there: a request that was sent would raise `SwarmConnectionError`, not `InvalidRequest`."""


@pytest.fixture
def client(tmp_path):
    c = SwarmClient(NOWHERE, max_retries=0, verbose=False, kept_rewards=tmp_path / "kept")
    yield c
    c.close()


@pytest.mark.parametrize(
    "task,output,field",
    [
        (Task(task_id="t", metadata={"\ud800k": "v"}), WorkflowOutput(reward=1.0), "task.metadata"),
        (Task(task_id="a\x00b"), WorkflowOutput(reward=1.0), "task.task_id"),
        (Task(task_id="t", metadata={"k": "a\x00"}), WorkflowOutput(reward=1.0), "task.metadata.k"),
        (Task(task_id="t"), WorkflowOutput(reward=1.0, metadata={"\udc00": 1}), "workflow_output.metadata"),
        (Task(task_id="t"), WorkflowOutput(reward=1.0, metadata={"m": math.nan}), "workflow_output.metadata.m"),
    ],
)
def test_end_episode_refuses_what_the_server_would_not_keep_as_given_before_sending(client, task, output, field):
    with pytest.raises(InvalidRequest, match="refused before it was sent") as err:
        client.end_episode(task, "ep-1", output)
    assert err.value.fields and err.value.fields[0].startswith(field), err.value


def test_begin_and_sync_refuse_before_sending(client):
    with pytest.raises(InvalidRequest, match="mission") as err:
        client.begin_episode(mission="m\x00")
    assert err.value.fields == ["mission"]
    job = AgentJetJob(batch_size=1, num_repeat=1, verl={"\ud800": 1})
    with pytest.raises(InvalidRequest, match="job"):
        client.sync_train_config(job)
    with pytest.raises(InvalidRequest, match="job"):
        client.auto_sync_train_config_and_start_engine(job)


def test_a_value_holding_a_lone_surrogate_is_stored_as_given(tmp_path):
    with proxy_in_process(tmp_path) as (client, store):
        client.sync_train_config(AgentJetJob(batch_size=4, num_repeat=1))
        client.start_engine()
        make_rolling(store, "http://127.0.0.1:9")  # an engine is registered; no call is made
        assert store.engines() == [RegisteredEngine("stub-0", "http://127.0.0.1:9/v1", "stub-model", 0)]
        uuid, _creds = client.begin_episode()
        task = Task(task_id="t", metadata={"answer": "x\ud800y", "text": "é 😀"})
        client.end_episode(task, uuid, WorkflowOutput(reward=1.0, metadata={"note": "\udfff"}))
        stored = store.get_episode(uuid).metadata
        assert stored["task"]["metadata"] == {"answer": "x\ud800y", "text": "é 😀"}
        assert stored["workflow"] == {"note": "\udfff"}  # the output's metadata, as the store keeps it

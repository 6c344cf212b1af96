"""A proxy killed with SIGKILL and restarted loses no ended episode and no logged call, and open
episodes carry on with their keys."""

import time

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus
from ajet_proxy.call_log import FLUSH_GUARANTEE_S
from ajet_store import Store, sqlite_url
from tests.conftest import ensure_rolling
from tests.support.procs import free_port, start_proxy

MSGS = [{"role": "user", "content": "survive this"}]


@pytest.mark.slow
def test_sigkill_loses_nothing_and_keys_survive(module_tmp, stub):
    url = sqlite_url(module_tmp / "crash.db")
    port = free_port()
    px = start_proxy(module_tmp, url, port=port)
    st = Store(url)
    client = SwarmClient(px.url)
    ensure_rolling(client, st, stub.url, job=AgentJetJob(batch_size=4, num_repeat=2))
    ended, open_eps, calls_made = [], [], {}
    for i in range(20):
        uuid, creds = client.begin_episode()
        oc = creds.as_openai_client(max_retries=0)
        for _ in range(2):
            oc.chat.completions.create(model="m", messages=MSGS)
        calls_made[uuid] = 2
        if i % 2 == 0:
            client.end_episode(Task(task_id=f"t{i % 4}"), uuid, WorkflowOutput(reward=i / 20))
            ended.append(uuid)
        else:
            open_eps.append((uuid, creds))
    time.sleep(FLUSH_GUARANTEE_S)  # the documented bound: calls older than this are on disk
    px.kill()

    for uuid in ended:
        row = st.get_episode(uuid)
        assert row.status == EpisodeStatus.ENDED and row.reward is not None
    for uuid, n in calls_made.items():
        assert len(st.calls(uuid)) == n, uuid

    px2 = start_proxy(module_tmp, url, port=port)  # same port: the clients' URLs stay valid
    try:
        for uuid, creds in open_eps:
            r = creds.as_openai_client(max_retries=0).chat.completions.create(model="m", messages=MSGS)
            assert r.choices[0].message.content
            client.end_episode(Task(task_id="t9"), uuid, WorkflowOutput(reward=1.0))
            calls = st.calls(uuid)
            assert [c.seq for c in calls] == [0, 1, 2]  # numbering continues after the restart
        assert st.totals()["ended"] >= len(ended) + len(open_eps)
    finally:
        px2.close()
        st.close()

"""The swarm outlives its database's restart (issue 43, round three: a `pg_ctl restart -m fast` mid-run made the
trainer exit 1, and `ajet-swarm` stopped the proxy with it). PostgreSQL is stopped mid-run and held down 20 s: the
proxy answers 503 naming the store meanwhile, the trainer waits with its model in memory, and once the database is
back the run goes on; nothing acknowledged is lost."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus
from ajet_store import Store
from tests.support import postgres
from tests.support.procs import Trainer, start_proxy
from tests.support.require import require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOWN_S = 20.0
"""How long the database stays down: the scenario the issue names (not a timing window: nothing is asserted on it)."""


def _episodes(client: SwarmClient, batch: int, ended: list[str]) -> None:
    for k in range(2):
        uuid, creds = client.begin_episode()
        creds.as_openai_client(max_retries=5).chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Say {batch}-{k}"}], max_tokens=2
        )
        client.end_episode(Task(task_id=f"t{batch}"), uuid, WorkflowOutput(reward=float(k)))
        ended.append(uuid)  # acknowledged: end_episode answered


def _wait_step(client: SwarmClient, step: int, trainer: Trainer) -> None:
    deadline = time.monotonic() + 180
    while client.get_engine_status().global_step < step:
        assert time.monotonic() < deadline and trainer.proc.poll() is None, trainer.log_tail()
        time.sleep(0.2)


def test_a_database_restart_mid_run_is_waited_out(tmp_path):
    require_postgres()
    server = postgres.PgServer()
    db = postgres.fresh_database(server.url, "outage")
    proxy, trainer = start_proxy(tmp_path, db), Trainer(tmp_path, db, tmp_path / "exp")
    client = SwarmClient(proxy.url, store_max_wait=120)
    ended: list[str] = []
    try:
        client.sync_train_config(AgentJetJob(model="builtin:tiny", batch_size=1, num_repeat=2, save_freq=1))
        client.start_engine()
        _episodes(client, 0, ended)
        _wait_step(client, 1, trainer)
        server.stop("fast")
        r = httpx.get(proxy.url + "/swarm/get_engine_status", timeout=30)
        assert r.status_code == 503 and r.json()["error"] == "StoreUnavailable", r.text  # the cause, named
        during = threading.Thread(target=_episodes, args=(client, 1, ended))  # the SDK waits for the store
        during.start()
        time.sleep(DOWN_S)
        assert trainer.proc.poll() is None and proxy.proc.poll() is None, trainer.log_tail()
        server.start()
        during.join(180)
        _wait_step(client, 2, trainer)
        _episodes(client, 2, ended)
        _wait_step(client, 3, trainer)
        log = trainer.log_tail(10**6)
        assert "the store is away" in log and "the store is back" in log
        st = Store(db)
        assert all(st.get_episode(u).status == EpisodeStatus.ENDED for u in ended) and len(ended) == 6
        assert sorted(st.get_episode(u).consumed_step for u in ended) == [1, 1, 2, 2, 3, 3]  # each trained once
        st.close()
    finally:
        client.close()
        trainer.close()
        proxy.close()
        server.close()

"""When the store refuses: values it cannot keep are refused before the group commit, a value the database refuses
fails only its own change, a store that takes no writes is named in a JSON error (not the trainer), and a trainer
that stopped beating ends a waiting `begin_episode` after a bounded wait (issue 30, items 1 and 4)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable

import httpx
import pytest
from starlette.testclient import TestClient

from ajet import (
    AgentJetJob,
    StoreUnavailable,
    SwarmClient,
    SwarmConnectionError,
    Task,
    TrainerUnresponsive,
    WorkflowOutput,
)
from ajet.protocol import CLIENT_HEADER
from ajet.types import ExperimentState
from ajet_proxy.app import create_app
from ajet_proxy.call_writer import CallWriter
from ajet_proxy.config import ProxyConfig
from ajet_store import TRAINER_TIMEOUT_S, Store, StoreRefusedValue, sqlite_url
from ajet_store.tables import experiments
from tests.support import postgres
from tests.support.calls import flushed_calls
from tests.support.procs import start_proxy, start_stub
from tests.support.require import need, require_postgres
from tests.support.rolling import ensure_rolling, make_rolling
from tests.support.stores import a_call
from tests.support.stub_proxy import proxy_on_stub

JSON = {"Content-Type": "application/json"}


def _end_body(uuid: str, task: dict, reward: float = 1.0) -> dict:
    return {"episode_uuid": uuid, "task": task, "workflow_output": {"reward": reward}}


def _one_call(url: str, key: str) -> None:
    r = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def _begin_and_call(client: SwarmClient, proxy_url: str) -> str:
    uuid, creds = client.begin_episode()
    _one_call(proxy_url, creds.api_key)
    return uuid


# ------------------------------------------------------------------ values no database of the store can keep
@pytest.mark.parametrize(
    "task, field",
    [
        ({"task_id": "a\u0000b"}, "task.task_id"),
        ({"task_id": "t", "metadata": {"answer": "x\u0000"}}, "task.metadata.answer"),
        ({"task_id": "t", "metadata": {"k\u0000": 1}}, "task.metadata"),
        # a lone surrogate in a key: validation would rewrite it (as U+FFFD) and store another key than the one sent
        ({"task_id": "t", "metadata": {"k\ud800": 1}}, "task.metadata"),
        ({"task_id": "t", "metadata": {"deep": [{"\udc00": 1}]}}, "task.metadata.deep[0]"),
    ],
)
def test_a_nul_character_is_refused_naming_where(tmp_path: Path, task: dict, field: str):
    with proxy_on_stub(tmp_path, "nul") as sp:
        uuid = _begin_and_call(sp.client, sp.proxy.url)
        cid = {CLIENT_HEADER: sp.client.client_id}
        body = json.dumps(_end_body(uuid, task))  # ASCII escapes: a lone surrogate is sent as JSON allows it
        r = httpx.post(f"{sp.proxy.url}/swarm/end_episode", content=body, headers={**cid, **JSON})
        assert r.status_code == 422, r.text
        assert r.json()["error"] == "InvalidRequest" and field in r.json()["detail"]
        assert sp.store.get_episode(uuid).status.value == "open"  # nothing was written


def test_a_lone_surrogate_in_a_metadata_value_is_kept_as_sent(tmp_path: Path):
    with proxy_on_stub(tmp_path, "surrogate") as sp:
        uuid = _begin_and_call(sp.client, sp.proxy.url)
        body = json.dumps(_end_body(uuid, {"task_id": "t", "metadata": {"answer": "x\ud800y"}}))  # ASCII: \ud800
        headers = {**JSON, CLIENT_HEADER: sp.client.client_id}
        r = httpx.post(f"{sp.proxy.url}/swarm/end_episode", content=body, headers=headers)
        assert r.status_code == 200, r.text
        assert sp.store.get_episode(uuid).metadata["task"]["metadata"] == {"answer": "x\ud800y"}


def test_non_finite_numbers_and_long_client_ids_are_refused(tmp_path: Path):
    with proxy_on_stub(tmp_path, "bounds") as sp:
        uuid = _begin_and_call(sp.client, sp.proxy.url)
        raw = '{"episode_uuid": "%s", "task": {"task_id": "t", "metadata": {"score": Infinity}}, ' % uuid
        r = httpx.post(
            f"{sp.proxy.url}/swarm/end_episode",
            content=raw + '"workflow_output": {"reward": 1.0}}',
            headers={"Content-Type": "application/json", CLIENT_HEADER: sp.client.client_id},
        )
        assert r.status_code == 422 and "task.metadata.score" in r.json()["detail"], r.text
        r = httpx.post(f"{sp.proxy.url}/swarm/begin_episode", json={}, headers={CLIENT_HEADER: "c" * 300})
        assert r.status_code == 422 and r.json()["fields"] == [CLIENT_HEADER], r.text
        r = httpx.post(f"{sp.proxy.url}/swarm/begin_episode", json={"mission": "m\u0000"})
        assert r.status_code == 422 and "mission" in r.json()["detail"], r.text
        r = httpx.post(f"{sp.proxy.url}/swarm/begin_episode", json={}, headers={CLIENT_HEADER: "c" * 256})
        assert r.status_code == 200, r.text  # the column's width is kept, not less


# ------------------------------------------------------------------ PostgreSQL: one bad value, its neighbours commit
@pytest.fixture(scope="module")
def pg_url():
    require_postgres()
    with postgres.postgres_url() as url:
        yield url


MALFORMED_UUIDS = ["a\u0000b", "../a", "a b", "x" * 65, ""]


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_a_malformed_episode_uuid_is_refused_before_any_store_is_asked(tmp_path: Path, db: str, request):
    """A NUL in a uuid used to reach PostgreSQL, whose refusal became a 503 the SDK retried for a minute."""
    url = (
        sqlite_url(tmp_path / "u.db")
        if db == "sqlite"
        else postgres.fresh_database(request.getfixturevalue("pg_url"), "uuids")
    )
    proxy = start_proxy(tmp_path, url)
    try:
        for bad in MALFORMED_UUIDS:
            for path in ("abort_episode", "can_continue_episode", "get_episode"):
                r = httpx.post(f"{proxy.url}/swarm/{path}", json={"episode_uuid": bad}, timeout=30)
                assert r.status_code == 422 and r.json()["fields"] == ["episode_uuid"], (path, bad, r.text)
            r = httpx.post(f"{proxy.url}/swarm/end_episode", json=_end_body(bad, {"task_id": "t"}), timeout=30)
            assert r.status_code == 422 and r.json()["fields"] == ["episode_uuid"], (bad, r.text)
        assert httpx.get(f"{proxy.url}/explore/episodes/a%00b", timeout=30).status_code == 404
        r = httpx.post(f"{proxy.url}/swarm/get_episode", json={"episode_uuid": "0" * 32}, timeout=30)
        assert r.status_code == 404 and r.json()["error"] == "EpisodeNotFound", r.text  # well formed, unknown
        r = httpx.post(f"{proxy.url}/swarm/can_continue_episode", json={"episode_uuid": "0" * 32}, timeout=30)
        assert r.status_code == 200 and r.json()["can_continue"] is False, r.text
    finally:
        proxy.close()


def test_a_value_postgresql_refuses_fails_only_its_own_call_record(pg_url: str):
    """The group commit's contract, at the database: a batch that PostgreSQL rolls back for one record's value is
    written again record by record, so the 20 healthy records commit and only the bad one is refused."""
    store = Store(postgres.fresh_database(pg_url, "split_calls"))
    writer = CallWriter(store)
    writer.start()
    try:
        good = [a_call(f"ep{i}") for i in range(20)]
        bad = replace(a_call("bad"), engine="d" * 300)  # over the column's 128: PostgreSQL refuses

        async def burst() -> list[object]:
            return await asyncio.gather(*(writer.commit(r) for r in [*good[:10], bad, *good[10:]]),
                                        return_exceptions=True)  # fmt: skip

        results = asyncio.run(burst())
        assert isinstance(results[10], StoreRefusedValue) and "refused a value" in str(results[10])
        assert [r for i, r in enumerate(results) if i != 10] == [None] * 20
        assert all(len(store.calls(r.episode_uuid)) == 1 for r in good) and store.calls("bad") == []
    finally:
        writer.stop()
        store.close()


def test_bursts_with_one_bad_request_leave_every_healthy_one_answered_on_postgresql(tmp_path: Path, pg_url: str):
    """Round two's three bursts (20 healthy + 1 bad, three times each): before, 22, 16 and 28 of 60 healthy
    requests got a plain 500 because the bad value rolled back their shared transaction."""
    stub = start_stub(tmp_path)
    db = postgres.fresh_database(pg_url, "bursts")
    proxy, store = start_proxy(tmp_path, db), Store(db)
    try:
        client = SwarmClient(proxy.url, verbose=False)
        ensure_rolling(client, store, stub.url)
        statuses: dict[str, list[int]] = {"healthy": [], "bad": []}
        for _ in range(3):
            _burst_of_begins(proxy.url, statuses)
            _burst_of_ends(client, proxy.url, statuses)
        assert statuses["healthy"] and set(statuses["healthy"]) == {200}, statuses
        assert set(statuses["bad"]) == {422}, statuses
    finally:
        proxy.close()
        stub.close()
        store.close()


def _in_parallel(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def _burst_of_begins(url: str, statuses: dict[str, list[int]]) -> None:
    def begin(client_id: str):
        return lambda: httpx.post(f"{url}/swarm/begin_episode", json={}, headers={CLIENT_HEADER: client_id}, timeout=30)

    answers = _in_parallel([begin(f"healthy-{i}") for i in range(20)] + [begin("x" * 300)])
    statuses["healthy"] += [a.status_code for a in answers[:20]]
    statuses["bad"].append(answers[20].status_code)


def _burst_of_ends(client: SwarmClient, url: str, statuses: dict[str, list[int]]) -> None:
    uuids = [_begin_and_call(client, url) for _ in range(22)]
    cid = {CLIENT_HEADER: client.client_id}

    def end(uuid: str, task: dict, metrics: str = "{}"):
        body = '{"episode_uuid": "%s", "task": %s, "workflow_output": {"reward": 1.0, "log_metrics": %s}}'
        content = body % (uuid, json.dumps(task), metrics)
        return lambda: httpx.post(
            f"{url}/swarm/end_episode", content=content, headers={**cid, "Content-Type": "application/json"}, timeout=30
        )

    calls = [end(u, {"task_id": "t"}) for u in uuids[:20]]
    calls += [end(uuids[20], {"task_id": "a\u0000b"}), end(uuids[21], {"task_id": "t"}, '{"m": 1e309}')]
    answers = _in_parallel(calls)
    statuses["healthy"] += [a.status_code for a in answers[:20]]
    statuses["bad"] += [a.status_code for a in answers[20:]]


# ------------------------------------------------------------------ a silent trainer: a bounded wait, then an error
def _silence_the_trainer(store: Store, seconds: float) -> None:
    with store._writes.begin() as c:
        c.execute(experiments.update().values(trainer_heartbeat=time.time() - seconds))


def test_a_stopped_trainer_without_an_engine_is_named_unresponsive_once_its_heartbeat_is_old(tmp_path: Path):
    """A cleanly stopped trainer withdraws its engine: the proxy said "no engine is registered" (NotReady) before it
    looked at the heartbeat, so `trainer_max_silence` never applied and a begin waited out its hour."""
    with proxy_on_stub(tmp_path, "stopped") as sp:
        sp.store.remove_engines()
        deadline = time.monotonic() + 30
        while True:  # the proxy sees the engine gone (it re-reads the store before refusing)
            r = httpx.post(f"{sp.proxy.url}/swarm/begin_episode", json={}, timeout=30)
            if r.status_code == 503 and "no engine" in r.json()["detail"]:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        _silence_the_trainer(sp.store, TRAINER_TIMEOUT_S + 5)
        r = httpx.post(f"{sp.proxy.url}/swarm/begin_episode", json={}, timeout=30)
        assert r.status_code == 503 and r.json()["error"] == "TrainerUnresponsive", r.text
        client = SwarmClient(sp.proxy.url, verbose=False, trainer_max_silence=1.0)
        with pytest.raises(TrainerUnresponsive, match="no engine registered"):
            client.begin_episode()  # bounded by trainer_max_silence, not begin_episode_max_wait


def test_a_call_waiting_on_a_trainer_that_falls_silent_fails_within_the_bound(tmp_path: Path):
    """A hung trainer (SIGSTOP) held its calls for the proxy's engine timeout (600 s): a call waiting for its engine
    now fails with 503 `TrainerUnresponsive` once the heartbeat is `TRAINER_TIMEOUT_S` old (checked each second),
    and the call is logged as failed. The engine here would take 120 s; the heartbeat goes silent ~4 s in."""
    with proxy_on_stub(tmp_path, "hung") as sp:
        sp.store.heartbeat()
        uuid, creds = sp.client.begin_episode()
        _silence_the_trainer(sp.store, TRAINER_TIMEOUT_S - 4)
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "stub_delay": 120}
        t0 = time.monotonic()
        r = httpx.post(f"{sp.proxy.url}/v1/chat/completions", json=body, timeout=150,
                       headers={"Authorization": f"Bearer {creds.api_key}"})  # fmt: skip
        assert r.status_code == 503 and "no trainer heartbeat" in r.json()["error"]["message"], r.text
        assert time.monotonic() - t0 < 60  # the silence ended it, not the engine's 120 s
        (call,) = flushed_calls(sp.store, uuid, 1)
        assert call.seq == 0 and "no trainer heartbeat" in (call.error or "") and not call.trainable
        sp.stub.kill()  # it would sleep out the 120 s of the call the proxy gave up on before stopping


def test_a_call_begun_after_the_trainer_came_back_is_not_refused_on_the_proxys_stale_row(tmp_path: Path):
    """Issue 65: 0.02-0.04 s after a SIGCONT a begin was admitted (the store had the fresh heartbeat) but its first
    call got 503 "no trainer heartbeat for 151s": the watch read the row the proxy had cached, re-read every 0.2 s.
    Here the proxy never re-reads its row on its own (its poll is an hour), so its cache stays as stale as that race
    left it, and the call must still be served."""
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "stale.db")
    store = Store(url)
    store.sync_job(AgentJetJob(batch_size=2, num_repeat=2))
    store.transition(ExperimentState.BOOTING)
    make_rolling(store, stub.url)
    _silence_the_trainer(store, TRAINER_TIMEOUT_S + 120)  # hung: the proxy starts with this row
    app = create_app(ProxyConfig.from_config(db_url=url, poll_s=3600.0))
    try:
        with TestClient(app, base_url="http://127.0.0.1") as http:
            store.heartbeat()  # the trainer is back
            client = SwarmClient("http://127.0.0.1", http_client=http, verbose=False, max_retries=0)
            uuid, creds = client.begin_episode()
            body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
            r = http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {creds.api_key}"})
            assert r.status_code == 200, r.text
            (call,) = flushed_calls(store, uuid, 1)
            assert call.error is None and call.trainable
    finally:
        store.close()
        stub.close()


def test_the_silence_bound_is_the_proxys_setting_and_the_sdk_raises_at_it(tmp_path: Path):
    """Issue 65: the 30 s was a code constant, and the SDK guessed 120 s more on its own (149.4 s from a SIGSTOP to its
    raise). Now it is `trainer_timeout_s` (proxy.yaml, `--trainer-timeout-s`), the status says it, and by default
    the SDK raises the swarm's first `TrainerUnresponsive`. A heartbeat 5 s old is silence under a 3 s bound only."""
    url = sqlite_url(tmp_path / "bound.db")
    store = Store(url)
    store.sync_job(AgentJetJob(batch_size=8, num_repeat=1))
    store.transition(ExperimentState.BOOTING)
    make_rolling(store, "http://127.0.0.1:9")  # no call is made
    try:
        for bound, refused in ((30.0, False), (3.0, True)):
            app = create_app(ProxyConfig.from_config(db_url=url, trainer_timeout_s=bound))
            with TestClient(app, base_url="http://127.0.0.1") as http:
                client = SwarmClient("http://127.0.0.1", http_client=http, verbose=False, max_retries=0)
                assert client.get_engine_status().trainer_timeout_s == bound
                _silence_the_trainer(store, 5)
                if not refused:
                    assert client.begin_episode()[0]
                    continue
                t0 = time.monotonic()
                with pytest.raises(TrainerUnresponsive, match="no trainer heartbeat for 5s"):
                    client.begin_episode()  # the SDK's default: the swarm's bound, no wait of its own on top
                assert time.monotonic() - t0 < 10
    finally:
        store.close()


def test_a_silent_trainer_ends_the_wait_of_begin_episode(tmp_path: Path):
    with proxy_on_stub(tmp_path, "silent") as sp:
        _silence_the_trainer(sp.store, TRAINER_TIMEOUT_S + 5)
        client = SwarmClient(sp.proxy.url, verbose=False, trainer_max_silence=2.0)
        t0 = time.monotonic()
        with pytest.raises(TrainerUnresponsive, match="no trainer heartbeat") as e:
            client.begin_episode()
        # waited its bound, then gave up: the silence ended the wait, not `begin_episode_max_wait` (an hour, which
        # raises SwarmTimeout), before which it waited that hour
        assert time.monotonic() - t0 >= 2.0 and client.begin_episode_max_wait == 3600
        assert e.value.status == 503
        status = client.get_engine_status()
        assert status.trainer_silent_s is not None and status.trainer_silent_s > TRAINER_TIMEOUT_S
        sp.store.heartbeat()  # the trainer is back: begins work again, and the status says so
        assert client.begin_episode()[0]
        assert client.get_engine_status().trainer_silent_s is None


# ------------------------------------------------------------------ a full disk
def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0  # fmt: skip


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    need(_mount_tmpfs(disk, "4m"), "cannot mount a small tmpfs here (needs root and mount)", "AJET_REQUIRE_TMPFS")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_named_as_the_store_and_the_reward_lands_once_there_is_room(tmp_path: Path, small_disk: Path):
    stub = start_stub(tmp_path)
    url = sqlite_url(small_disk / "store.db")
    proxy, store = start_proxy(tmp_path, url), Store(url)
    try:
        client = SwarmClient(proxy.url, verbose=False, store_max_wait=30.0)
        ensure_rolling(client, store, stub.url)
        store.heartbeat()
        uuid = _begin_and_call(client, proxy.url)
        filler = _fill(small_disk)
        r = httpx.post(
            f"{proxy.url}/swarm/end_episode",
            json=_end_body(uuid, {"task_id": "t"}),
            headers={CLIENT_HEADER: client.client_id},
        )
        assert r.status_code == 503 and r.headers.get("Retry-After"), r.text  # before: 500 "Internal Server Error"
        assert (
            r.json()["error"] == "StoreUnavailable" and "store" in r.json()["detail"] and "full" in r.json()["detail"]
        )

        _silence_the_trainer_on_full_disk(store, filler)
        r = httpx.post(f"{proxy.url}/swarm/begin_episode", json={})
        assert r.status_code == 503 and r.json()["error"] == "StoreUnavailable", r.text  # not "the trainer is down"
        assert "heartbeat" in r.json()["detail"] and "full" in r.json()["detail"]
        with pytest.raises(StoreUnavailable):
            SwarmClient(proxy.url, verbose=False, store_max_wait=1.0).begin_episode()

        threading.Timer(2.0, filler.unlink).start()  # room again while the client retries its end
        result = client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=0.5))
        assert result.status.value == "ended" and store.get_episode(uuid).reward == 0.5  # the reward was not lost
    finally:
        proxy.close()
        stub.close()
        store.close()


def test_a_reward_refused_past_the_wait_is_kept_and_lands_when_the_store_is_back(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
):
    """Round four: a reward the store refused for longer than the client waits is kept on the client's disk, and
    the next client of the swarm (another process: another client id) sends it again once the store is back; a kept
    reward the swarm refuses for good (its episode was aborted meanwhile) is dropped with a warning, not silently."""
    monkeypatch.setenv("AJET_KEPT_REWARDS", str(tmp_path / "kept"))
    stub = start_stub(tmp_path)
    url = sqlite_url(small_disk / "store.db")
    proxy, store = start_proxy(tmp_path, url), Store(url)
    try:
        client = SwarmClient(proxy.url, verbose=False, store_max_wait=1.0)
        ensure_rolling(client, store, stub.url)
        store.heartbeat()
        kept, lost = _begin_and_call(client, proxy.url), _begin_and_call(client, proxy.url)
        filler = _fill(small_disk)
        for uuid in (kept, lost):
            with pytest.raises(StoreUnavailable):
                client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=0.5))
        assert store.get_episode(kept).reward is None and len(client._kept.pending()) == 2
        assert client.resend_kept_rewards() == 2  # still out: both stay
        filler.unlink()
        store.abort_episode(lost, client.client_id)
        later = SwarmClient(proxy.url, verbose=False)  # another process, another client id
        assert later.client_id != client.client_id and later.resend_kept_rewards() == 0
        assert store.get_episode(kept).reward == 0.5 and store.get_episode(kept).status.value == "ended"
        assert store.get_episode(lost).status.value == "aborted" and later._kept.pending() == []
    finally:
        proxy.close()
        stub.close()
        store.close()


def test_a_reward_for_a_swarm_that_cannot_be_reached_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tests.support.procs import free_port

    monkeypatch.setenv("AJET_KEPT_REWARDS", str(tmp_path / "kept"))
    client = SwarmClient(f"http://127.0.0.1:{free_port()}", verbose=False, max_retries=0)
    with pytest.raises(SwarmConnectionError):
        client.end_episode(Task(task_id="t"), "ep-1", WorkflowOutput(reward=1.0))
    assert [e.episode_uuid for e in client._kept.pending()] == ["ep-1"] and client.resend_kept_rewards() == 1


def _silence_the_trainer_on_full_disk(store: Store, filler: Path) -> None:
    """Make the heartbeat old, as a trainer that cannot write it would leave it (room for this one write only)."""
    filler.unlink()
    _silence_the_trainer(store, TRAINER_TIMEOUT_S + 5)
    _fill(filler.parent)

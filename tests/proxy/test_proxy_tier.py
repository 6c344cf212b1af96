"""Several proxies on one PostgreSQL store (issue 31): an episode begun through one proxy is called, continued and
ended through any other, trains exactly once, and a proxy killed under load costs its clients nothing but a retry
through the others."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import httpx
import orjson
import pytest

from ajet import AgentJetJob, SwarmClient
from ajet.protocol import CLIENT_HEADER
from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import Store
from tests.support import postgres
from tests.support.procs import Proc, Trainer, start_proxy, start_stub
from tests.support.require import require_postgres
from tests.support.rolling import ensure_rolling, wait_state

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _postgres() -> None:
    require_postgres()


CLIENT = "tier-client"


@pytest.fixture(scope="module")
def pg_url():
    with postgres.postgres_url() as url:
        yield url


def _tier(tmp: Path, db: str, n: int = 3) -> list[Proc]:
    return [start_proxy(tmp, db, "--shared-store") for _ in range(n)]


class Agents:
    """Episodes driven over raw HTTP through proxies chosen at random, each request retried through another
    proxy when the one it reached is gone or did not answer in time, and (while the engine is between steps)
    after a pause. Calls the agent gave up on are counted: the proxy may have logged them (as cut off by the
    client), and that is the only way the store may hold more calls than the agent saw answered."""

    def __init__(self, urls: list[str], http: httpx.AsyncClient):
        self.urls, self.http = list(urls), http
        self.dead: set[str] = set()
        self.answered: dict[str, list[str]] = {}
        self.given_up: Counter[str] = Counter()
        """Episode key -> its calls the agent sent and gave up on (a timeout, a proxy gone mid-call)."""
        self.keys: dict[str, str] = {}
        """Episode uuid -> its key."""

    async def post(self, route: str, body: dict[str, Any], key: Optional[str] = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {CLIENT_HEADER: CLIENT}
        for _ in range(600):
            url = random.choice([u for u in self.urls if u not in self.dead])
            try:
                r = await self.http.post(url + route, json=body, headers=headers)
            except httpx.HTTPError as exc:  # gone (before or during this request) or slow: on through the others
                if not isinstance(exc, httpx.TimeoutException):
                    self.dead.add(url)
                if key is not None and not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                    self.given_up[key] += 1
                continue
            if r.status_code == 503:  # between steps (ROLLING_POST, WEIGHT_SYNCING): wait and try again
                await asyncio.sleep(0.2)
                continue
            assert r.status_code == 200, (route, r.status_code, r.text)
            return r.json()
        raise AssertionError(f"{route} never succeeded")

    async def episode(self, task_id: str, calls: int = 2) -> str:
        begun = await self.post("/swarm/begin_episode", {})
        uuid, key = begun["episode_uuid"], begun["api_key"]
        self.keys[uuid] = key
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Say the letter of {task_id}"}]
        self.answered[uuid] = []
        for turn in range(calls):
            answer = await self.post(
                "/v1/chat/completions", {"model": "policy", "messages": messages, "max_tokens": 4}, key
            )
            self.answered[uuid].append(answer["id"])
            messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                         {"role": "user", "content": f"And again ({turn})"}]  # fmt: skip
        body = {"episode_uuid": uuid, "task": {"task_id": task_id}, "workflow_output": {"reward": random.random()}}
        await self.post("/swarm/end_episode", body)
        return uuid


def _stored_ids(st: Store, uuid: str) -> list[str]:
    return [orjson.loads(c.response)["id"] for c in st.calls(uuid) if c.response and c.error is None]


def _assert_two_answered_calls(st: Store, uuid: str, answered: list[str], given_up: int) -> None:
    """The episode's calls are numbered 0.. without a gap; each answer its agent saw is stored; the second answered
    call extends the first as tokens although another proxy may have served it. Beyond those two, the store holds
    at most the calls the agent gave up on; when it gave up on none, it holds exactly the two."""
    calls = st.calls(uuid)
    assert [c.seq for c in calls] == list(range(len(calls))), uuid
    assert 2 <= len(calls) <= 2 + given_up, (uuid, [(c.seq, c.error) for c in calls], given_up)
    by_id = {orjson.loads(c.response)["id"]: c for c in calls if c.response and c.error is None}
    first, second = (by_id[i] for i in answered)  # KeyError: an answered call missing from the store
    if given_up == 0:
        assert [c.token_history for c in calls] == ["first", "extended"], (uuid, [c.engine for c in calls])
    assert second.token_history == "extended" and second.parent_seq == first.seq, (uuid, second)


def test_three_proxies_and_a_trainer_train_every_episode_exactly_once(tmp_path: Path, pg_url: str):
    """204 episodes at once, each begun, called twice and ended through proxies chosen at random: 3 steps of
    34 tasks x 2, every episode trained once, every answered call stored, each second call extending the first
    as tokens although another proxy served it, and every proxy's statistics the same swarm's."""
    db = postgres.fresh_database(pg_url, "tier")
    proxies = _tier(tmp_path, db)
    trainer = Trainer(tmp_path, db, tmp_path / "exp")
    st = Store(db)
    try:
        client = SwarmClient(proxies[0].url, client_id=CLIENT, verbose=False)
        job = AgentJetJob(model="builtin:tiny", batch_size=34, num_repeat=2, max_response_length_in_one_turn=4)
        client.auto_sync_train_config_and_start_engine(job)
        wait_state(client, ExperimentState.ROLLING, timeout=120)

        async def run() -> tuple[list[str], dict[str, list[str]]]:
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=400)) as http:
                agents = Agents([p.url for p in proxies], http)
                uuids = await asyncio.gather(*(agents.episode(f"t{i // 2}") for i in range(204)))
                return list(uuids), agents

        uuids, agents = asyncio.run(run())
        assert len(set(uuids)) == 204
        for _ in range(600):
            if len(st.steps()) >= 3:
                break
            assert trainer.proc.poll() is None, trainer.log_tail()
            asyncio.run(asyncio.sleep(0.5))
        assert [s.step for s in st.steps()] == [1, 2, 3], trainer.log_tail()
        consumed = Counter(st.get_episode(u).consumed_step for u in uuids)
        assert consumed == {1: 68, 2: 68, 3: 68}  # every episode trained, exactly once
        for u in uuids:
            _assert_two_answered_calls(st, u, agents.answered[u], agents.given_up[agents.keys[u]])
        stats = [SwarmClient(p.url, verbose=False).get_rollout_stat() for p in proxies]
        assert len({orjson.dumps(s.totals) for s in stats}) == 1 and stats[0].totals["ended"] == 204
        assert {len(s.open_episodes) for s in stats} == {0}
    finally:
        trainer.close()
        for p in proxies:
            p.close()
        st.close()


def test_a_proxy_killed_under_load_costs_its_clients_a_retry_and_loses_no_answered_call(tmp_path: Path, pg_url: str):
    """100 episodes calling through 3 proxies; one is SIGKILLed mid-load. Its clients' next calls succeed through
    the others, every answered call is in the store, no call number is given twice, and every episode ends."""
    db = postgres.fresh_database(pg_url, "tier_kill")
    stub = start_stub(tmp_path)
    proxies = _tier(tmp_path, db)
    st = Store(db)
    try:
        client = SwarmClient(proxies[0].url, client_id=CLIENT, verbose=False)
        ensure_rolling(client, st, stub.url)
        killed = asyncio.Event()

        async def run() -> dict[str, list[str]]:
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=300)) as http:
                agents = Agents([p.url for p in proxies], http)

                async def one(i: int) -> None:
                    begun = await agents.post("/swarm/begin_episode", {})
                    uuid, key = begun["episode_uuid"], begun["api_key"]
                    agents.answered[uuid] = []
                    for _ in range(8):
                        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                        answer = await agents.post("/v1/chat/completions", chat, key)
                        agents.answered[uuid].append(answer["id"])
                        if sum(map(len, agents.answered.values())) >= 300 and not killed.is_set():
                            killed.set()
                            await asyncio.to_thread(proxies[1].kill)
                    end = {"episode_uuid": uuid, "task": {"task_id": f"t{i}"}, "workflow_output": {"reward": 1.0}}
                    await agents.post("/swarm/end_episode", end)

                await asyncio.gather(*(one(i) for i in range(100)))
                assert agents.dead == {proxies[1].url}
                return agents.answered

        answered = asyncio.run(run())
        assert killed.is_set() and len(answered) == 100
        for uuid, ids in answered.items():
            row = st.get_episode(uuid)
            assert row.status == EpisodeStatus.ENDED
            stored = _stored_ids(st, uuid)
            assert set(ids) <= set(stored), uuid  # every answered call is in the store
            seqs = [c.seq for c in st.calls(uuid)]
            assert len(seqs) == len(set(seqs)), seqs  # no number given twice across proxies
    finally:
        for p in proxies:
            p.close()
        stub.close()
        st.close()


def test_three_workers_under_sustained_load_answer_no_5xx(tmp_path: Path, pg_url: str):
    """Round three: `bench.proxy_scaling` (3 workers, 64 episodes in flight) ended with `end_episode` answering 503
    "deadlock detected": two transactions upserted the same counters in another order. Counters (and clients and
    episode rows) are now locked in one order, and a transaction PostgreSQL rolls back anyway is run again."""
    db = postgres.fresh_database(pg_url, "tier_load")
    stub = start_stub(tmp_path)
    proxy = start_proxy(tmp_path, db, "--workers", "3")
    store = Store(db)
    statuses: Counter[int] = Counter()
    try:
        client = SwarmClient(proxy.url)
        ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=100_000, num_repeat=1))

        async def episode(http: httpx.AsyncClient, i: int) -> None:
            r = await http.post(proxy.url + "/swarm/begin_episode", json={}, headers={CLIENT_HEADER: f"c{i % 64}"})
            statuses[r.status_code] += 1
            if r.status_code != 200:
                return
            key, uuid = r.json()["api_key"], r.json()["episode_uuid"]
            chat = {"model": "policy", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1}
            r = await http.post(
                proxy.url + "/v1/chat/completions", json=chat, headers={"Authorization": f"Bearer {key}"}
            )
            statuses[r.status_code] += 1
            end = {"episode_uuid": uuid, "task": {"task_id": f"t{i % 8}"}, "workflow_output": {"reward": float(i % 2)}}
            r = await http.post(proxy.url + "/swarm/end_episode", json=end, headers={CLIENT_HEADER: f"c{i % 64}"})
            statuses[r.status_code] += 1

        async def load(n: int) -> None:
            sem = asyncio.Semaphore(64)
            async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=64)) as http:

                async def one(i: int) -> None:
                    async with sem:
                        await episode(http, i)

                await asyncio.gather(*(one(i) for i in range(n)))

        asyncio.run(load(800))
        assert statuses == Counter({200: 2400}), statuses
        assert store.totals()["ended"] == 800 and store.totals()["calls"] == 800
        client.close()
    finally:
        proxy.close()
        stub.close()
        store.close()

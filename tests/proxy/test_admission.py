"""Admission of an experiment's calls to the engines (`ajet_proxy.call_gate`): at most its job's
`max_calls_in_flight` at once, the rest waiting first come first; a waiter whose client leaves gives up its turn.
Through a real proxy and stub engine, the engine never sees more of the experiment's calls at once than the cap."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import httpx

from ajet import AgentJetJob, SwarmClient
from ajet_proxy.call_gate import CallGate, proxy_share
from ajet_store import Store, sqlite_url
from tests.support.procs import Proc, start_proxy, start_stub
from tests.support.rolling import ensure_rolling
from tests.support.waits import wait_for


async def _entered(gate: CallGate, cap: Optional[int], n: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(gate.enter(cap)) for _ in range(n)]
    for _ in range(3):
        await asyncio.sleep(0)
    return tasks


def test_calls_beyond_the_cap_wait_first_come_first_and_a_leaver_gives_up_its_turn():
    async def scenario() -> None:
        gate = CallGate()
        tasks = await _entered(gate, 2, 5)
        assert [t.done() for t in tasks] == [True, True, False, False, False] and gate.running == 2
        tasks[3].cancel()  # its client left while it waited
        await asyncio.sleep(0)
        gate.leave(2)
        await asyncio.sleep(0)
        assert [t.done() and not t.cancelled() for t in tasks] == [True, True, True, False, False]
        gate.leave(2)
        await asyncio.sleep(0)
        assert tasks[4].done() and gate.running == 2 and not gate.waiting and gate.waited == 3

    asyncio.run(scenario())


def test_a_lowered_cap_drains_to_it_and_no_cap_never_waits():
    async def scenario() -> None:
        gate = CallGate()
        await _entered(gate, 3, 3)
        waiting = await _entered(gate, 1, 1)
        gate.leave(1)  # over the new cap: the place is not handed on
        await asyncio.sleep(0)
        assert not waiting[0].done() and gate.running == 2
        gate.leave(1)
        gate.leave(1)
        await asyncio.sleep(0)
        assert waiting[0].done() and gate.running == 1
        free = await _entered(CallGate(), None, 50)
        assert all(t.done() for t in free)

    asyncio.run(scenario())


def test_a_place_handed_to_a_call_whose_client_left_goes_to_the_next():
    async def scenario() -> None:
        gate = CallGate()
        await _entered(gate, 1, 1)
        second, third = await _entered(gate, 1, 2)
        gate.leave(1)  # hands the place to `second`, which is cancelled before it runs
        second.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert third.done() and not third.cancelled() and gate.running == 1

    asyncio.run(scenario())


def test_the_proxies_split_the_cap_and_their_parts_add_up_to_it():
    ids = ["a", "b", "c"]
    for cap in range(1, 12):
        parts = [proxy_share(cap, ids, me) for me in ids]
        assert sum(parts) == cap and max(parts) - min(parts) <= 1 and parts == sorted(parts, reverse=True)
    assert [proxy_share(2, ids, me) for me in ids] == [1, 1, 0]  # fewer places than proxies: the cap holds
    assert proxy_share(None, ids, "a") is None and proxy_share(5, ["a"], "a") == 5


def test_a_raised_share_lets_the_waiting_in_at_once():
    async def scenario() -> None:
        gate = CallGate()
        await _entered(gate, 1, 1)
        waiting = await _entered(gate, 1, 3)
        gate.admit_waiting(3)  # another proxy left: this one's share went from 1 to 3
        await asyncio.sleep(0)
        assert [t.done() for t in waiting] == [True, True, False] and gate.running == 3
        gate.admit_waiting(None)
        await asyncio.sleep(0)
        assert waiting[2].done() and gate.running == 4 and not gate.waiting

    asyncio.run(scenario())


def _calls_at_once(urls: list[str], keys: list[str]) -> list[int]:
    """Each key's call (0.4 s at the stub engine), all at once, round-robin over `urls`; their statuses."""
    answers: list[int] = []

    def call(url: str, key: str, stream: bool) -> None:
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "stream": stream, "stub_delay": 0.4}  # fmt: skip
        res = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                         timeout=60)  # fmt: skip
        answers.append(res.status_code)

    threads = [threading.Thread(target=call, args=(urls[i % len(urls)], k, i % 2 == 0)) for i, k in enumerate(keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_the_engine_never_sees_more_of_an_experiments_calls_at_once_than_its_cap(tmp_path):
    cap = 2
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "swarm.db")
    store, proxy = Store(url), start_proxy(tmp_path, url)
    client = SwarmClient(proxy.url, verbose=False)
    try:
        ensure_rolling(client, store, stub.url, AgentJetJob(batch_size=8, num_repeat=1, max_calls_in_flight=cap))
        keys = [client.begin_episode()[1].api_key for _ in range(6)]
        answers = _calls_at_once([proxy.url], keys)
        running = [e["running"] for e in httpx.get(stub.url + "/stub/journal").json() if e["op"] == "chat"]
        assert answers == [200] * 6 and len(running) == 6
        assert max(running) <= cap  # six callers at once, each answer 0.4 s: without the gate they overlap
    finally:
        client.close()
        proxy.close()
        stub.close()
        store.close()


@contextmanager
def two_proxies_rolling(tmp_path: Path, cap: int) -> Iterator[tuple[list[Proc], Proc, SwarmClient]]:
    """Two proxies on one store (`--shared-store`), the experiment ROLLING on a stub engine with `max_calls_in_flight`
    `cap`, once each proxy knows the job (its row is ROLLING) and counts both (`/health`'s `proxies`); with the stub
    and a client of the first proxy."""
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "swarm.db")
    store = Store(url)
    proxies = [start_proxy(tmp_path, url, "--shared-store") for _ in range(2)]
    client = SwarmClient(proxies[0].url, verbose=False)
    try:
        ensure_rolling(client, store, stub.url, AgentJetJob(batch_size=8, num_repeat=1, max_calls_in_flight=cap))
        ready = {"status": "ok", "state": "ROLLING", "proxies": 2}
        for p in proxies:
            wait_for(lambda p=p: httpx.get(p.url + "/health").json() == ready, f"{p.url} to count both", 30)
        yield proxies, stub, client
    finally:
        client.close()
        for p in proxies:
            p.close()
        stub.close()
        store.close()


def test_proxies_on_one_store_split_the_cap_so_the_engine_never_sees_more_than_it(tmp_path):
    """Two proxies on one store, cap 2: each admits one call at a time; six calls at once over both never put more
    than two at the engine (each proxy alone would admit two: four at once)."""
    cap = 2
    with two_proxies_rolling(tmp_path, cap) as (proxies, stub, client):
        keys = [client.begin_episode()[1].api_key for _ in range(6)]
        answers = _calls_at_once([p.url for p in proxies], keys)
        running = [e["running"] for e in httpx.get(stub.url + "/stub/journal").json() if e["op"] == "chat"]
        assert answers == [200] * 6 and len(running) == 6
        assert max(running) <= cap


def test_a_client_that_leaves_while_its_call_waits_for_a_place_leaves_no_call_and_takes_no_number(tmp_path):
    """Cap 1: a call waits behind a slow one; its client times out and leaves. The call never reached an engine,
    so the store has no call of it (nor one numbered -1), and the episode's next call is its number 0."""
    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "swarm.db")
    store, proxy = Store(url), start_proxy(tmp_path, url)
    client = SwarmClient(proxy.url, verbose=False)
    try:
        ensure_rolling(client, store, stub.url, AgentJetJob(batch_size=8, num_repeat=1, max_calls_in_flight=1))
        (_, slow), (waiter_uuid, waiter) = client.begin_episode(), client.begin_episode()

        def call(key: str, delay: float, timeout: float) -> httpx.Response:
            body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                    "stub_delay": delay}  # fmt: skip
            headers = {"Authorization": f"Bearer {key}"}
            return httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=timeout)

        holder = threading.Thread(target=call, args=(slow.api_key, 3.0, 60))
        holder.start()
        while not [e for e in httpx.get(stub.url + "/stub/journal").json() if e["op"] == "chat"]:
            threading.Event().wait(0.05)  # the slow call holds the one place
        try:
            call(waiter.api_key, 0.0, 0.5)
            raise AssertionError("the waiting call was answered although the one place was taken")
        except httpx.ReadTimeout:
            pass
        holder.join()
        assert call(waiter.api_key, 0.0, 60).status_code == 200
        assert [c.seq for c in store.calls(waiter_uuid)] == [0]
    finally:
        client.close()
        proxy.close()
        stub.close()
        store.close()


def test_a_proxy_whose_share_of_the_cap_is_none_says_so_once_in_its_log(tmp_path):
    """Cap 1 over two proxies: one admits the call, the other's share is none (its calls would wait until a proxy
    leaves); that one, and only that one, says why in its log, once."""
    with two_proxies_rolling(tmp_path, 1) as (proxies, _stub, _client):
        said = "max_calls_in_flight is below the 2 live proxies"
        wait_for(lambda: any(said in p.log_tail() for p in proxies), "a proxy to say its share is none", 30)
        time.sleep(2.5)  # two more housekeeping rounds: the share is still none, and it is not said again
        assert sorted(p.log_path.read_text().count(said) for p in proxies) == [0, 1]

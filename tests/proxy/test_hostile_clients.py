"""Clients that misbehave without a bad byte: connections held open and trickled, and episodes begun and then
abandoned by the thousand. The proxy keeps serving healthy episodes and keeps nothing of the abandoned ones
(issue 30, item 5: round two's cases, bounded in time, on loopback)."""

from __future__ import annotations

import asyncio
import http.client
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psutil
import pytest

from ajet.protocol import CLIENT_HEADER
from ajet.types import EpisodeStatus
from tests.support.stub_proxy import StubProxy, proxy_on_stub

pytestmark = pytest.mark.slow

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _healthy_episode(sp: StubProxy) -> None:
    uuid, creds = sp.client.begin_episode()
    r = httpx.post(f"{sp.proxy.url}/v1/chat/completions", json=CHAT,
                   headers={"Authorization": f"Bearer {creds.api_key}"}, timeout=30)  # fmt: skip
    assert r.status_code == 200, r.text
    end = {"episode_uuid": uuid, "task": {"task_id": "t"}, "workflow_output": {"reward": 1.0}}
    r = httpx.post(f"{sp.proxy.url}/swarm/end_episode", json=end, headers={CLIENT_HEADER: sp.client.client_id})
    assert r.status_code == 200, r.text


def _trickle(host: str, port: int, stop: threading.Event, sent: list[int]) -> None:
    """A slowloris client: a request's bytes, one every 0.2 s, never finished while the test runs."""
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n" + "x" * 1000
    with socket.create_connection((host, port), timeout=5) as s:
        for ch in head:
            if stop.is_set():
                return
            try:
                s.sendall(ch.encode())
            except OSError:
                return  # the server closed it: also fine
            sent[0] += 1
            time.sleep(0.2)


def test_idle_and_trickling_connections_leave_healthy_episodes_served(tmp_path: Path):
    """200 idle keep-alive connections and 50 clients trickling a request byte by byte, for 10 s: every healthy
    episode (begin, a call, end) beside them is answered (round two: p95 54.6 -> 59.0 ms, 0 errors)."""
    with proxy_on_stub(tmp_path, "slow") as sp:
        u = urlparse(sp.proxy.url)
        host, port = u.hostname or "127.0.0.1", u.port or 80
        idle = [socket.create_connection((host, port), timeout=5) for _ in range(200)]
        stop, sent = threading.Event(), [0]
        tricklers = [threading.Thread(target=_trickle, args=(host, port, stop, sent), daemon=True) for _ in range(50)]
        try:
            for t in tricklers:
                t.start()
            deadline, served, latencies = time.monotonic() + 10, 0, []
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                _healthy_episode(sp)
                latencies.append(time.monotonic() - t0)
                served += 1
            assert served >= 20 and sent[0] > 1000, (served, sent[0])
            print(f"beside 200 idle + 50 trickling: {served} episodes, slowest {max(latencies) * 1000:.0f} ms")
        finally:
            stop.set()
            for s in idle:
                s.close()
        assert httpx.get(sp.proxy.url + "/health").status_code == 200


async def _abandon(url: str, n: int, client_id: str) -> None:
    """`n` episodes begun (a 3 s discard timeout: short, yet longer than a begin-to-call gap on a loaded 2-core box),
    each called once, never ended."""
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=32)) as http:
        sem = asyncio.Semaphore(32)

        async def one() -> None:
            async with sem:
                r = await http.post(f"{url}/swarm/begin_episode", json={"discard_episode_timeout": 3.0},
                                    headers={CLIENT_HEADER: client_id})  # fmt: skip
                assert r.status_code == 200, r.text
                key = r.json()["api_key"]
                r = await http.post(f"{url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == 200, r.text

        await asyncio.gather(*(one() for _ in range(n)))


def test_an_idle_keep_alive_connection_outlives_a_clients_own_expiry(tmp_path: Path):
    """httpx and the OpenAI SDK reuse a connection idle up to 5 s; the proxy keeps one open longer, so a request on it
    is answered, not reset (at uvicorn's default 5 s a loaded box's client read a reset: `KEEP_ALIVE_S`)."""
    with proxy_on_stub(tmp_path, "keep") as sp:
        u = urlparse(sp.proxy.url)
        conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=10)
        try:
            conn.request("GET", "/health")
            first = conn.getresponse()
            assert first.status == 200 and first.read()
            held = conn.sock
            time.sleep(6)  # idle past a client's 5 s expiry and uvicorn's default keep-alive
            conn.request("GET", "/health")  # on the same socket: RemoteDisconnected had the proxy closed it
            again = conn.getresponse()
            assert again.status == 200 and again.read() and conn.sock is held
        finally:
            conn.close()


def _wait_all_expired(sp: StubProxy, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sp.store.totals()["open"] or sp.client.get_rollout_stat().open_episodes:
        assert time.monotonic() < deadline, sp.store.totals()
        time.sleep(0.5)


def test_thousands_of_abandoned_episodes_expire_and_the_proxy_keeps_nothing_of_them(tmp_path: Path):
    """2 x 2,000 episodes begun, called and abandoned: every one expires, the proxy's own registry empties, and its
    memory after the second wave is where the first left it (round two: RSS 100-107 MB throughout)."""
    with proxy_on_stub(tmp_path, "abandoned") as sp:
        proc = psutil.Process(sp.proxy.pid)
        rss = []
        for _wave in range(2):
            asyncio.run(_abandon(sp.proxy.url, 2000, sp.client.client_id))
            _wait_all_expired(sp)
            rss.append(proc.memory_info().rss / 2**20)
        assert sp.store.totals()[EpisodeStatus.EXPIRED.value] == 4000
        assert sp.store.totals()["calls"] == 4000  # every answered call kept, though no episode ended
        print(f"proxy RSS after each wave of 2,000 abandoned episodes: {rss[0]:.0f} MB, {rss[1]:.0f} MB")
        assert rss[1] - rss[0] < 25, rss  # nothing kept per abandoned episode (2,000 would show)
        _healthy_episode(sp)

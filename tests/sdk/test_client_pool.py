"""The clients' connection pools keep every connection a burst opened: with httpx's default caps (20 kept alive)
each burst of more episodes than that closed the surplus, and httpcore can close one it has just handed to a
waiting request (encode/httpcore#1110), which then stalls for its whole read timeout. A stdlib HTTP/1.1 server
holds each wave's requests until all of them arrived, so each wave has `WAVE` connections open at once."""

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from ajet import AsyncSwarmClient, SwarmClient

WAVE = 32


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.barrier = threading.Barrier(WAVE, timeout=20)
        self.ports: set[int] = set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        server.ports.add(self.client_address[1])
        server.barrier.wait()
        body = json.dumps({"state": "ROLLING", "global_step": 0, "policy_version": 0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    srv = _Server()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def _url(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_the_sync_client_keeps_a_bursts_connections(server):
    client = SwarmClient(_url(server), verbose=False)
    with ThreadPoolExecutor(WAVE) as pool:
        for _ in range(2):
            list(pool.map(lambda _i: client._http.get("/swarm/get_engine_status"), range(WAVE)))
    assert len(server.ports) == WAVE  # the second wave reused every connection of the first
    client.close()


def test_httpx_default_caps_would_close_the_surplus(server):
    """The contrast: the same two waves through httpx's defaults open new connections in the second."""
    client = httpx.Client(base_url=_url(server))
    with ThreadPoolExecutor(WAVE) as pool:
        for _ in range(2):
            list(pool.map(lambda _i: client.get("/swarm/get_engine_status"), range(WAVE)))
    assert len(server.ports) > WAVE
    client.close()


def test_the_async_client_keeps_a_bursts_connections(server):
    async def waves() -> None:
        async with AsyncSwarmClient(_url(server), verbose=False) as client:
            for _ in range(2):
                await asyncio.gather(*(client._http.get("/swarm/get_engine_status") for _ in range(WAVE)))

    asyncio.run(waves())
    assert len(server.ports) == WAVE

"""A client's CPU per request on each transport the SDK could use, side by side in one run.

    python -m bench.async_transport [--requests 3000] [--concurrency 32]

A uvicorn server in its own process answers a chat-completion-sized JSON body with a small JSON answer (the
shape of the demo's calls). The client sends `--requests` of them, `--concurrency` at a time, through:
- `sync_threads`: one `httpx.Client` shared by a thread pool (`SwarmClient`, the demo's former client);
- `httpx_asyncio`: one `httpx.AsyncClient` on httpx's own asyncio stack (httpcore + anyio);
- `httpx_over_aiohttp`: one `httpx.AsyncClient` over aiohttp's transport (`AsyncSwarmClient` since 2026-12-03);
- `aiohttp`: aiohttp alone, the floor.
One JSON line per transport (the client process's CPU milliseconds per request, user + system, and wall
seconds), then the ratios against `sync_threads`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable

import httpx
from httpx_aiohttp import AiohttpTransport

from ajet.client_base import POOL_LIMITS
from ajet_swarm.launch import free_port
from bench.results import emit

BODY = {"model": "policy", "messages": [{"role": "user", "content": "Say the letter: a"}], "max_tokens": 1}
SERVER = """
import uvicorn
from fastapi import FastAPI, Request
app = FastAPI()
@app.post("/v1/chat/completions")
async def chat(request: Request):
    await request.body()
    return {"id": "c", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}]}
uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="error", access_log=False, loop="uvloop", http="httptools")
"""


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def sync_threads(url: str, n: int, c: int) -> None:
    client = httpx.Client(base_url=url, limits=POOL_LIMITS)
    with ThreadPoolExecutor(c) as pool:
        list(pool.map(lambda _i: client.post("/v1/chat/completions", json=BODY).json(), range(n)))
    client.close()


async def _gathered(client: httpx.AsyncClient, n: int, c: int) -> None:
    gate = asyncio.Semaphore(c)

    async def one() -> None:
        async with gate:
            (await client.post("/v1/chat/completions", json=BODY)).json()

    await asyncio.gather(*(one() for _ in range(n)))
    await client.aclose()


async def httpx_asyncio(url: str, n: int, c: int) -> None:
    await _gathered(httpx.AsyncClient(base_url=url, limits=POOL_LIMITS), n, c)


async def httpx_over_aiohttp(url: str, n: int, c: int) -> None:
    await _gathered(httpx.AsyncClient(base_url=url, transport=AiohttpTransport(limits=POOL_LIMITS)), n, c)


async def aiohttp_alone(url: str, n: int, c: int) -> None:
    import aiohttp

    gate = asyncio.Semaphore(c)
    async with aiohttp.ClientSession(base_url=url) as session:

        async def one() -> None:
            async with gate, session.post("/v1/chat/completions", json=BODY) as resp:
                await resp.json()

        await asyncio.gather(*(one() for _ in range(n)))


ASYNC: dict[str, Callable[[str, int, int], Awaitable[None]]] = {
    "httpx_asyncio": httpx_asyncio,
    "httpx_over_aiohttp": httpx_over_aiohttp,
    "aiohttp": aiohttp_alone,
}


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER.replace("PORT", str(port))])
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url + "/docs")
            return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the server did not start")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    proc, url = start_server()
    figures: dict[str, float] = {}
    try:
        for name in ["sync_threads", *ASYNC]:
            t0, w0 = cpu_s(), time.monotonic()
            if name == "sync_threads":
                sync_threads(url, args.requests, args.concurrency)
            else:
                asyncio.run(ASYNC[name](url, args.requests, args.concurrency))
            figures[name] = (cpu_s() - t0) / args.requests * 1000
            wall = round(time.monotonic() - w0, 2)
            line = {"bench": "async_transport", "client": name, "cpu_ms_per_request": round(figures[name], 3)}
            emit("async_transport", {**line, "wall_s": wall, "concurrency": args.concurrency})
    finally:
        proc.terminate()
    ratios = {f"{name}_over_sync_threads": round(ms / figures["sync_threads"], 2) for name, ms in figures.items()}
    emit("async_transport", {"bench": "async_transport", "figure": "ratios", **ratios})


if __name__ == "__main__":
    main()

"""The proxy's cost of one episode (begin_episode -> one chat call -> end_episode), beside the call alone.

    python -m bench.episode_plumbing [--episodes 2000] [--concurrency 32]

A proxy on a fresh SQLite store, ROLLING, routed to a local vLLM-format backend that answers at once; the
load comes from one asyncio client (aiohttp), so the client's own cost stays out of the proxy's figures.
Two paths, side by side in one run, each `--episodes` times with `--concurrency` in flight:
- `episode`: begin_episode, one chat call with the new key, end_episode with a reward;
- `call`: one chat call on an already begun episode (what the data plane alone costs).
One JSON line per path (episodes or calls per second, p50/p99 latency, the proxy's CPU ms per episode or
call), then the ratio line. The issue's target: <= 3 ms of proxy CPU per episode of one call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]

from ajet.protocol import CLIENT_HEADER
from bench.proxy_overhead import cpu_seconds, start_middle
from bench.results import emit
from tests.support.procs import start_stub

CHAT = {"model": "policy", "messages": [{"role": "user", "content": "Say the letter: a"}], "max_tokens": 1}
CLIENT = {CLIENT_HEADER: "bench-client"}


async def _post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    async with session.post(url, json=body, headers=headers) as resp:
        data: dict[str, Any] = await resp.json(content_type=None)
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {data}")
        return data


async def episode(session: aiohttp.ClientSession, base: str, i: int) -> None:
    begun = await _post(session, base + "/swarm/begin_episode", {"discard_episode_timeout": 600}, CLIENT)
    await _post(session, base + "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {begun['api_key']}"})
    await _post(
        session,
        base + "/swarm/end_episode",
        {
            "episode_uuid": begun["episode_uuid"],
            "task": {"task_id": f"t{i % 8}"},
            "workflow_output": {"reward": float(i % 2)},
        },
        CLIENT,
    )


async def call(session: aiohttp.ClientSession, base: str, key: str) -> None:
    await _post(session, base + "/v1/chat/completions", CHAT, {"Authorization": f"Bearer {key}"})


async def load(n: int, concurrency: int, one: Any) -> tuple[float, list[float]]:
    """Run `one(session, i)` n times with `concurrency` in flight; (seconds, latencies in ms)."""
    lat: list[float] = []
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def run(i: int) -> None:
            async with sem:
                t0 = time.perf_counter()
                await one(session, i)
                lat.append((time.perf_counter() - t0) * 1000.0)

        t0 = time.perf_counter()
        await asyncio.gather(*(run(i) for i in range(n)))
        return time.perf_counter() - t0, lat


def measure(path: str, pid: int, n: int, concurrency: int, one: Any) -> dict[str, Any]:
    asyncio.run(load(min(200, n), concurrency, one))  # warm-up
    c0 = cpu_seconds(pid)
    secs, lat = asyncio.run(load(n, concurrency, one))
    cpu_ms = (cpu_seconds(pid) - c0) * 1000.0 / n
    lat.sort()
    return {
        "bench": "episode_plumbing",
        "path": path,
        "concurrency": concurrency,
        "n": n,
        "per_s": round(n / secs, 1),
        "p50_ms": round(statistics.median(lat), 2),
        "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2),
        "proxy_cpu_ms": round(cpu_ms, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ajet-bench-"))
    stub = start_stub(tmp, "--delay", "0")
    px, keys, _store = start_middle(tmp, stub, "aiohttp", 1, name="plumbing")
    try:
        base = px.url
        ep = measure("episode", px.pid, args.episodes, args.concurrency, lambda s, i: episode(s, base, i))
        emit("episode_plumbing", ep)
        one_call = measure("call", px.pid, args.episodes, args.concurrency, lambda s, i: call(s, base, keys[0]))
        emit("episode_plumbing", one_call)
        emit(
            "episode_plumbing",
            {
                "bench": "episode_plumbing",
                "figure": "ratio",
                "concurrency": args.concurrency,
                "episode_cpu_over_call_cpu": round(ep["proxy_cpu_ms"] / one_call["proxy_cpu_ms"], 2),
                "target_proxy_cpu_ms_per_episode": 3.0,
            },
        )
    finally:
        px.close()
        stub.close()


if __name__ == "__main__":
    main()

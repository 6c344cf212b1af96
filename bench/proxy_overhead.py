"""Proxy overhead, side by side in one run: direct vs ajet-proxy vs the LiteLLM Router path.

All three paths hit the same local vLLM-format backend. "ajet" is `ajet-proxy` with auth, routing and
call logging on (the default aiohttp send path); "litellm_router" is the same proxy sending through
`litellm.Router.acompletion` (`--transport litellm`), so the only difference is the send path.
Prints one JSON line per measurement, then one line of ratios per (stream, concurrency).

Each configuration runs twice: against an engine that answers at once (the proxy's CPU is the
bottleneck: a worst case) and against one that takes `--backend-delay-ms` per answer (closer to a
real engine, where the proxy's cost hides behind generation time). Rows carry `backend_delay_ms`.

Usage: python -m bench.proxy_overhead [--requests 3000] [--concurrency 32 256] [--backend-delay-ms 0 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import aiohttp
import psutil

REPO = Path(__file__).resolve().parents[1]

from ajet import AgentJetJob, SwarmClient
from ajet.types import ExperimentState
from ajet_store import Store, sqlite_url
from bench.results import emit
from tests.support.procs import Proc, start_proxy, start_stub
from tests.support.rolling import make_rolling, wait_state

BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Say something short about benchmarks."},
    ],
    "max_tokens": 24,
}


async def _one(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: dict[str, Any], stream: bool
) -> float:
    t0 = time.perf_counter()
    async with session.post(url, json=body, headers=headers) as resp:
        if stream:
            async for _chunk in resp.content.iter_any():
                pass
        else:
            await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}")
    return (time.perf_counter() - t0) * 1000.0


async def load(url: str, keys: list[str], stream: bool, concurrency: int, n: int) -> tuple[float, list[float]]:
    """Send `n` requests with `concurrency` in flight; returns (seconds, latencies in ms)."""
    body = {**BODY, "stream": stream}
    if "direct" in url:
        body = {**body, "return_token_ids": True, "logprobs": True}
    url = url.replace("#direct", "")
    lat: list[float] = []
    counter = iter(range(n))
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker(w: int) -> None:
            headers = {"Authorization": f"Bearer {keys[w % len(keys)]}"}
            for _ in counter:
                lat.append(await _one(session, url, headers, body, stream))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return time.perf_counter() - t0, lat


def cpu_seconds(pid: Optional[int]) -> float:
    """CPU seconds of process `pid` and its children (a proxy's workers) so far; 0 for None."""
    if pid is None:
        return 0.0
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:  # a worker that ended meanwhile
            pass
    return total


@dataclass(frozen=True)
class Meter:
    """What a run reads off the proxy's process before and after its calls, and the row field it fills."""

    key: str
    """The row's field: the reading per call, in the field's unit."""
    read: Callable[[Optional[int]], float]
    """A cumulative reading of process `pid` (CPU seconds, instructions): after minus before is the run's."""
    scale: float = 1.0
    """The factor from the reading to the field's unit (1000 from CPU seconds to ms)."""


CPU = Meter("proxy_cpu_ms_per_call", cpu_seconds, 1000.0)
"""The proxy's CPU ms per call (its workers included)."""


def measure(
    path: str, url: str, keys: list[str], pid: Optional[int], stream: bool, concurrency: int, n: int, meter: Meter = CPU
) -> dict[str, Any]:
    asyncio.run(load(url, keys, stream, concurrency, min(200, n)))  # warm-up
    c0 = meter.read(pid)
    secs, lat = asyncio.run(load(url, keys, stream, concurrency, n))
    c1 = meter.read(pid)
    lat.sort()
    return {
        "path": path,
        "stream": stream,
        "concurrency": concurrency,
        "requests": n,
        "seconds": round(secs, 3),
        "req_s": round(n / secs, 1),
        "p50_ms": round(statistics.median(lat), 2),
        "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2),
        meter.key: None if pid is None else round((c1 - c0) * meter.scale / n, 3),
    }


def start_middle(
    tmp: Path, stub: Proc, transport: str, n_keys: int, *extra: str, name: str = ""
) -> tuple[Proc, list[str], Store]:
    """An ajet-proxy (`extra`: more `ajet-proxy start` options) on its own store, ROLLING, with `n_keys` episodes."""
    url = sqlite_url(tmp / f"{name or transport}.db")
    px = start_proxy(tmp, url, "--transport", transport, *extra)
    st = Store(url)
    client = SwarmClient(px.url)
    client.sync_train_config(AgentJetJob(batch_size=1, num_repeat=1))
    client.start_engine()
    make_rolling(st, stub.url)
    wait_state(client, ExperimentState.ROLLING)
    keys = [client.begin_episode(discard_episode_timeout=3600)[1].api_key for _ in range(n_keys)]
    return px, keys, st


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--backend-delay-ms", type=float, nargs="+", default=[0.0, 20.0])
    ap.add_argument("--quick", action="store_true", help="a few hundred requests, for a smoke run")
    args = ap.parse_args()
    n = 300 if args.quick else args.requests
    tmp = Path(tempfile.mkdtemp(prefix="ajet-bench-"))
    stubs = {d: start_stub(tmp, "--delay", str(d / 1000.0)) for d in args.backend_delay_ms}
    first = stubs[args.backend_delay_ms[0]]
    middles = {u: start_middle(tmp, first, u, 64) for u in ("aiohttp", "litellm")}
    try:
        for delay, stub in stubs.items():
            for _px, _keys, st in middles.values():
                make_rolling(st, stub.url)  # re-point the engine at this stub
            time.sleep(1.0)
            for stream in (False, True):
                for conc in args.concurrency:
                    run_group(stub, middles, delay, stream, conc, n)
        for transport, (px, _keys, st) in middles.items():
            px.close()  # a clean shutdown flushes the call log
            emit("proxy_overhead", {"figure": "calls_logged", "transport": transport, "calls": st.totals()["calls"]})
    finally:
        for px, _k, _s in middles.values():
            px.close()
        for stub in stubs.values():
            stub.close()


def run_group(stub: Proc, middles: dict, delay: float, stream: bool, conc: int, n: int) -> None:
    """direct, ajet and litellm_router for one configuration, then their ratios."""
    group = [measure("direct", stub.url + "/v1/chat/completions#direct", ["none"], None, stream, conc, n)]
    for path, transport in (("ajet", "aiohttp"), ("litellm_router", "litellm")):
        px, keys, _st = middles[transport]
        # the LiteLLM path is 10-30x slower: fewer requests keep the run short (rows carry their count)
        count = n if path == "ajet" else max(conc * 2, n // 4)
        group.append(measure(path, px.url + "/v1/chat/completions", keys, px.pid, stream, conc, count))
    for row in group:
        emit("proxy_overhead", {**row, "backend_delay_ms": delay})
    d, a, lr = group
    emit(
        "proxy_overhead",
        {
            "figure": "ratios",
            "stream": stream,
            "concurrency": conc,
            "backend_delay_ms": delay,
            "ajet_throughput_vs_direct": round(a["req_s"] / d["req_s"], 3),
            "litellm_cpu_over_ajet_cpu": round(lr["proxy_cpu_ms_per_call"] / a["proxy_cpu_ms_per_call"], 2),
        },
    )


if __name__ == "__main__":
    main()

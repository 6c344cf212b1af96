"""Episodes per second and proxy CPU per episode with 1, 2 and 3 proxy processes on one store, in one run.

    python -m bench.proxy_scaling [--episodes 2000] [--concurrency 64] [--store postgresql|sqlite|both]

A throwaway PostgreSQL on loopback (as the store's tests start one; `AJET_TEST_PG_URL` names another) and a
vLLM-format backend that answers at once. For each shape, a fresh store and `ajet-proxy start --workers N` (one
port, the kernel spreading connections), ROLLING on the engine; the load is `bench.episode_plumbing`'s episode
(begin_episode, one chat call, end_episode) from one asyncio client. Shapes: one proxy alone (numbers calls in
memory), one proxy with `--shared-store` (what sharing costs), then 2 and 3 workers. On SQLite, where the CLI
refuses workers, 2 and 3 `--shared-store` proxies on ports of their own take their place (the client goes
round-robin): processes sharing the one file all the same, and the figures say what that buys. One JSON line
per shape (episodes/s, p50/p99 latency, the proxy processes' CPU ms per episode), then the ratios to one proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ajet import AgentJetJob, SwarmClient
from ajet.types import ExperimentState
from ajet_store import Store, sqlite_url
from bench.episode_plumbing import episode, load
from bench.proxy_overhead import cpu_seconds
from bench.results import Results
from tests.support import postgres
from tests.support.procs import Proc, start_proxy, start_stub
from tests.support.rolling import make_rolling, wait_state

SHAPES = (("alone", 1, ()), ("shared", 1, ("--shared-store",)), ("workers-2", 2, ()), ("workers-3", 3, ()))


def start_shape(store: str, db: str, tmp: Path, stub: Proc, workers: int, extra: tuple[str, ...]) -> list[Proc]:
    """The shape's proxies, ROLLING on the engine: one `--workers N` proxy on PostgreSQL; on SQLite, where the CLI
    refuses workers, N `--shared-store` proxies on ports of their own (processes sharing the one file all the same)."""
    if store == "sqlite" and workers > 1:
        proxies = [start_proxy(tmp, db, "--shared-store", *extra) for _ in range(workers)]
    else:
        proxies = [start_proxy(tmp, db, "--workers", str(workers), *extra)]
    st = Store(db)
    client = SwarmClient(proxies[0].url, verbose=False)
    client.sync_train_config(AgentJetJob(batch_size=100_000, num_repeat=1))  # never a full batch: no step
    client.start_engine()
    make_rolling(st, stub.url)
    st.heartbeat()
    wait_state(client, ExperimentState.ROLLING)
    st.close()
    return proxies


def measure(store: str, shape: str, proxies: list[Proc], n: int, concurrency: int) -> dict[str, Any]:
    bases = [p.url for p in proxies]  # one URL (the kernel spreads a port's connections), or round-robin

    def one(session: Any, i: int) -> Any:
        return episode(session, bases[i % len(bases)], i)

    asyncio.run(load(min(200, n), concurrency, one))  # warm-up
    c0 = sum(cpu_seconds(p.pid) for p in proxies)  # the proxies and their workers
    secs, lat = asyncio.run(load(n, concurrency, one))
    cpu_ms = (sum(cpu_seconds(p.pid) for p in proxies) - c0) * 1000.0 / n
    lat.sort()
    return {
        "bench": "proxy_scaling",
        "store": store,
        "shape": shape,
        "concurrency": concurrency,
        "n": n,
        "episodes_per_s": round(n / secs, 1),
        "p50_ms": round(statistics.median(lat), 2),
        "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 2),
        "proxy_cpu_ms_per_episode": round(cpu_ms, 3),
    }


def run_store(store: str, url_for: Any, tmp: Path, stub: Proc, args: argparse.Namespace, out: Results) -> None:
    rows = {}
    for shape, workers, extra in SHAPES:
        proxies = start_shape(store, url_for(shape), tmp, stub, workers, extra)
        try:
            rows[shape] = measure(store, shape, proxies, args.episodes, args.concurrency)
            out.emit(rows[shape])
        finally:
            for px in proxies:
                px.close()
    one = rows["alone"]
    for shape, row in rows.items():
        if shape != "alone":
            out.emit({"bench": "proxy_scaling", "figure": "ratio_to_one_proxy", "store": store, "shape": shape,
                      "episodes_per_s": round(row["episodes_per_s"] / one["episodes_per_s"], 2),
                      "cpu_per_episode": round(row["proxy_cpu_ms_per_episode"]
                                               / one["proxy_cpu_ms_per_episode"], 2)})  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--store", choices=["postgresql", "sqlite", "both"], default="both")
    args = ap.parse_args()
    out = Results("proxy_scaling")
    tmp = Path(tempfile.mkdtemp(prefix="ajet-bench-"))
    with ExitStack() as stack:
        stub = start_stub(tmp, "--delay", "0")
        stack.callback(stub.close)
        if args.store in ("postgresql", "both"):
            server = stack.enter_context(postgres.postgres_url())
            run_store("postgresql", lambda shape: postgres.fresh_database(server, f"bench_{shape.replace('-', '_')}"),
                      tmp, stub, args, out)  # fmt: skip
        if args.store in ("sqlite", "both"):
            run_store("sqlite", lambda shape: sqlite_url(tmp / f"{shape}.db"), tmp, stub, args, out)


if __name__ == "__main__":
    main()

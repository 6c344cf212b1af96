"""Store growth: a store of 1M calls, and what the trainer, the stats routes and export cost on it.

Builds a SQLite store through the real write path (`Store.write_calls`): `--calls` calls in episodes of
`--calls-per-episode`, request/response bodies of `--body-bytes`, one recorded step per `--batch`
episodes (all but the last batch consumed, as in a long run). Then prints one JSON line per figure:
- `size`: file bytes per call;
- `trainer_batch`: the trainer's pool query + batch selection + the batch read (its calls decoded);
- `route`: each stats route served by a real `ajet-proxy` on that store (median of `--reps` calls);
- `totals`: the kept counters vs counting the call log (the old way), side by side, as a ratio;
- `export`: `ajet-proxy export` throughput over the newest steps' episodes;
- `prune`: `ajet-proxy prune --keep-steps 2 --vacuum`, with the size per call after it.

Usage: python -m bench.store_growth [--calls 1000000] [--body-bytes 2000] [--reps 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]

from ajet import AgentJetJob
from ajet.types import BatchMode, ExperimentState
from ajet_store import Store, select_batch, sqlite_url
from ajet_store import tables as t
from ajet_store.types import CallRecord
from bench.results import emit as emit_row
from tests.support.procs import start_proxy


def emit(**row: Any) -> None:
    emit_row("store_growth", row)


def timed(fn: Callable[[], Any], reps: int) -> float:
    """Median milliseconds of `reps` runs of `fn`."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def build(st: Store, calls: int, per_episode: int, body_bytes: int, batch: int) -> int:
    """Fill the store; returns the number of episodes."""
    st.sync_job(AgentJetJob(batch_size=batch, num_repeat=1))
    st.transition(ExperimentState.ROLLING)
    request = json.dumps({"messages": [{"role": "user", "content": "q" * (body_bytes * 2 // 3)}]})
    response = json.dumps({"choices": [{"message": {"content": "a" * (body_bytes // 3)}}]})
    episodes, now, step = calls // per_episode, time.time(), 0
    for first in range(0, episodes, batch):
        uuids = [f"ep{i:07d}" for i in range(first, min(first + batch, episodes))]
        for u in uuids:
            st.begin_episode(u, "h" + u, "bench", "train", 3600, mission=f"m{int(u[2:]) % 4}")
        st.write_calls(
            [
                CallRecord(
                    u,
                    s,
                    request,
                    response,
                    list(range(40)),
                    list(range(20)),
                    [-0.5] * 20,
                    "stop",
                    0,
                    "d",
                    5.0,
                    now,
                    error="boom" if s == 7 and u.endswith("3") else None,
                )
                for u in uuids
                for s in range(per_episode)
            ]
        )
        for k, u in enumerate(uuids):
            st.end_episode(u, "bench", f"task{k}", k % 2 * 1.0, None, {})
        if first + batch < episodes:  # the last batch stays in the pool
            step += 1
            st.record_step(step, step, uuids, 0.5, {"loss": 0.1})
    return episodes


def bench_trainer(st: Store, batch: int, reps: int) -> None:
    def batch_read() -> None:
        pool = st.pool_episodes()
        chosen = select_batch(pool, BatchMode.EPISODES, batch, 1)
        st.rewarded_episodes(chosen)

    emit(figure="trainer_batch", ms=timed(batch_read, reps), episodes=batch, limit_ms=100)


def bench_totals(st: Store, reps: int) -> None:
    def scan() -> None:
        with st._read() as c:  # the way totals were counted before schema 4
            c.execute(sa.select(sa.func.count()).select_from(t.llm_calls)).scalar()
            c.execute(
                sa.select(sa.func.count()).select_from(t.llm_calls).where(t.llm_calls.c.error.is_not(None))
            ).scalar()

    kept, counted = timed(st.totals, reps), timed(scan, max(3, reps // 5))
    emit(figure="totals", kept_ms=kept, counted_ms=counted, counted_over_kept=round(counted / max(kept, 1e-3), 1))


def bench_routes(tmp: Path, url: str, reps: int) -> None:
    px = start_proxy(tmp, url)
    try:
        with httpx.Client(base_url=px.url, timeout=60) as http:
            for name, call in (
                ("get_engine_status", lambda: http.get("/swarm/get_engine_status")),
                ("get_rollout_stat", lambda: http.get("/swarm/get_rollout_stat")),
                ("get_steps", lambda: http.post("/swarm/get_steps", json={"after": 0, "limit": 500})),
                ("get_episode", lambda: http.post("/swarm/get_episode", json={"episode_uuid": "ep0000000"})),
            ):
                assert call().status_code == 200
                emit(figure="route", route=name, ms=timed(call, reps), limit_ms=20)
    finally:
        px.close()


def bench_export(tmp: Path, url: str, recent_step: int) -> None:
    out = tmp / "export.jsonl"
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "ajet_proxy.cli", "export", "--db", url, "--since", str(recent_step), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    secs = time.perf_counter() - t0
    n = int(res.stdout.split()[1])
    emit(
        figure="export",
        episodes=n,
        seconds=round(secs, 2),
        episodes_per_s=round(n / secs, 1),
        mb=round(out.stat().st_size / 1e6, 1),
    )


def bench_prune(url: str, path: Path, calls: int) -> None:
    before = path.stat().st_size
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ajet_proxy.cli", "prune", "--db", url, "--keep-steps", "2", "--vacuum"],
        check=True,
        capture_output=True,
    )
    emit(
        figure="prune",
        seconds=round(time.perf_counter() - t0, 1),
        bytes_per_call_before=round(before / calls),
        bytes_per_call_after=round(path.stat().st_size / calls),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--calls-per-episode", type=int, default=20)
    ap.add_argument("--body-bytes", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temporary folder)")
    args = ap.parse_args()
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="ajet-store-growth-"))
    path = tmp / "growth.db"
    path.unlink(missing_ok=True)
    url = sqlite_url(path)
    st = Store(url)
    t0 = time.perf_counter()
    episodes = build(st, args.calls, args.calls_per_episode, args.body_bytes, args.batch)
    emit(figure="build", calls=args.calls, episodes=episodes, seconds=round(time.perf_counter() - t0, 1))
    emit(figure="size", bytes=path.stat().st_size, bytes_per_call=round(path.stat().st_size / args.calls))
    bench_trainer(st, args.batch, args.reps)
    bench_totals(st, args.reps)
    last_step = st.experiment().global_step
    st.close()
    bench_routes(tmp, url, args.reps)
    bench_export(tmp, url, max(1, last_step - 4))
    bench_prune(url, path, args.calls)
    if not args.dir:
        for f in tmp.iterdir():
            os.unlink(f)


if __name__ == "__main__":
    main()

"""A client's CPU per control call, this tree's SDK against a baseline commit's, side by side in one run.

    python -m bench.client_overhead --baseline REF [--calls 2000] [--rounds 3]

One `ajet-proxy` (this tree's, on a fresh SQLite store) answers `get_engine_status`. Each SDK (this checkout, and
`REF` checked out in a temporary git worktree) runs in a process of its own: `SwarmClient` makes `--calls` calls one
after another, then `AsyncSwarmClient` makes as many, 16 at a time in one event loop; the process's CPU time (user +
system) per call is measured after a warm-up. The two trees alternate, `--rounds` times; each row is the median of a
tree's rounds, then the ratios this tree / baseline. What it measures: what a client's own code costs per call (the
operation runner of `ajet.client_steps` against the clients it replaced), the transport's share included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ajet_store import sqlite_url
from bench.baseline import baseline_tree
from bench.results import emit
from scripts.source_tree import pythonpath
from tests.support.procs import REPO, Proc, free_port, offline_env

BENCH = "client_overhead"

CLIENT = """
import asyncio, json, sys, time
from ajet import AsyncSwarmClient, SwarmClient
url, calls = sys.argv[1], int(sys.argv[2])
client = SwarmClient(url, verbose=False)
for _ in range(50):
    client.get_engine_status()
t0 = time.process_time()
for _ in range(calls):
    client.get_engine_status()
sync_ms = (time.process_time() - t0) * 1000 / calls
client.close()

async def run():
    aio = AsyncSwarmClient(url, verbose=False)
    gate = asyncio.Semaphore(16)
    async def one():
        async with gate:
            await aio.get_engine_status()
    await asyncio.gather(*(one() for _ in range(50)))
    t0 = time.process_time()
    await asyncio.gather(*(one() for _ in range(calls)))
    ms = (time.process_time() - t0) * 1000 / calls
    await aio.aclose()
    return ms

print(json.dumps({"sync": sync_ms, "async": asyncio.run(run())}))
"""


def measure(tree: Path, url: str, calls: int, kept: Path) -> dict[str, float]:
    """One process of `tree`'s SDK: CPU ms per call of each client."""
    env = offline_env(PYTHONPATH=pythonpath(tree), AJET_KEPT_REWARDS=str(kept))
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, str(calls)], capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a git ref whose SDK to compare with")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name, baseline_tree(args.baseline, Path(tmp_name) / "baseline") as wt:
        tmp = Path(tmp_name)
        port = free_port()
        proxy = Proc(
            [sys.executable, "-m", "ajet_proxy.cli", "start", "--port", str(port), "--db", sqlite_url(tmp / "s.db"),
             "--log-level", "warning"],
            f"http://127.0.0.1:{port}", "/health", tmp / "proxy.log", env=offline_env(),
        )  # fmt: skip
        try:
            runs: dict[str, list[dict[str, float]]] = {"this": [], "baseline": []}
            for _ in range(args.rounds):
                for name, tree in (("this", REPO), ("baseline", wt)):
                    runs[name].append(measure(tree, proxy.url, args.calls, tmp / "kept"))
        finally:
            proxy.close()
    report(runs, args)


def report(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    """One row per tree and client, then the ratios."""
    med = {(t, c): statistics.median(r[c] for r in rs) for t, rs in runs.items() for c in ("sync", "async")}
    for (tree, client), ms in med.items():
        ref = args.baseline if tree == "baseline" else "this"
        emit(BENCH, {"tree": ref, "client": client, "cpu_ms_per_call": round(ms, 4), "calls": args.calls,
              "rounds": args.rounds})  # fmt: skip
    emit(BENCH, {"figure": "ratios", "baseline": args.baseline,
          "sync_this_over_baseline": round(med[("this", "sync")] / med[("baseline", "sync")], 3),
          "async_this_over_baseline": round(med[("this", "async")] / med[("baseline", "async")], 3)})  # fmt: skip


if __name__ == "__main__":
    main()

"""The proxy's CPU per call by API, and against an earlier commit, side by side in one run.

One vLLM-format stub engine; one ajet-proxy from this tree, and (with `--baseline REF`) one from commit
REF, checked out in a temporary git worktree and run from it. Each proxy gets plain and streamed chat
calls; this tree's also gets Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`) calls
asking the same thing. Each run has 64 episodes of its own, ended after it (no run inherits another's history);
the baseline's runs first; the proxies share one CPU, the stub and the load the others. One JSON line per
(proxy, API, stream): CPU ms per call, req/s, p50/p99; then the ratios, medians of `--rounds` rounds: this
tree's chat over the baseline's, and each API's over chat's. Rows are appended to `bench/results/api_cost.jsonl`.

`--variant OPTIONS` adds a third proxy from this tree started with those options (say, the garbage collector's
threshold at Python's default), compared on chat calls, to tell one change's share from the rest.

`--meter instructions` counts the instructions each proxy runs per call instead of its CPU seconds (under
valgrind's callgrind, `bench/callgrind.py`): a figure that moves by about a percent between runs where CPU seconds
on a shared VM move by a tenth. Each proxy's idle rate (its timers: a beat, the sweeps; read over 10 s with no
calls) is taken off each run's count in proportion to the run's seconds, since a proxy under callgrind runs ten
times slower and its timers would otherwise count ten times over; the raw count stays in the row.

Usage: python -m bench.api_cost [--requests 2000] [--concurrency 32] [--rounds 3] [--baseline 78a54de]
       [--variant=--gc-young-threshold=700] [--meter instructions]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import httpx

REPO = Path(__file__).resolve().parents[1]

from ajet import SwarmClient
from ajet.types import ExperimentState
from ajet_store import sqlite_url
from bench import proxy_overhead
from bench.callgrind import Callgrind
from bench.proxy_overhead import CPU, Meter, measure
from bench.results import Results
from scripts.source_tree import pythonpath
from tests.support.procs import Proc, free_port, offline_env, start_stub
from tests.support.rolling import wait_state

MESSAGES = proxy_overhead.BODY["messages"]
BODIES = {
    "chat": ("/v1/chat/completions", proxy_overhead.BODY),
    "responses": (
        "/v1/responses",
        {
            "model": "m",
            "instructions": MESSAGES[0]["content"],
            "input": MESSAGES[1]["content"],
            "max_output_tokens": 24,
        },
    ),
    "messages": (
        "/v1/messages",
        {"model": "m", "system": MESSAGES[0]["content"], "max_tokens": 24, "messages": [MESSAGES[1]]},
    ),
}


def start_proxy_from(
    tmp: Path, tree: Path, name: str, extra: Sequence[str] = (), prefix: Sequence[str] = ()
) -> tuple[Proc, str]:
    """`ajet-proxy start` (`extra`: more of its options; `prefix`: a command to run it under) run from the packages
    of `tree` (this checkout, or a baseline worktree); with the URL of its store."""
    db = sqlite_url(tmp / f"{name}.db")
    port = free_port()
    env = offline_env(
        PYTHONPATH=pythonpath(tree),
        PYTHONHASHSEED="0",  # the same string hashes, so the same dict probes, in every proxy and every run
    )
    px = Proc(
        [*prefix, sys.executable, "-m", "ajet_proxy.cli", "start", "--port", str(port), "--db", db]
        + ["--log-level", "warning"]
        + list(extra),
        f"http://127.0.0.1:{port}",
        "/health",
        tmp / f"{name}.log",
        env=env,
    )
    return px, db


BASELINE_ROLLING = Path(__file__).resolve().parent / "baseline_rolling.py"
"""The script that brings a tree's store to ROLLING in that tree's own store code."""


def roll(px: Proc, tree: Path, db: str, backend: str) -> None:
    """Bring a proxy to ROLLING on the stub engine."""
    client = SwarmClient(px.url)
    # only the fields every version knows: a baseline proxy refuses job fields added after it
    httpx.post(px.url + "/swarm/sync_train_config", json={"job": {"batch_size": 1, "num_repeat": 1}}).raise_for_status()
    client.start_engine()
    env = offline_env(PYTHONPATH=pythonpath(tree))
    subprocess.run([sys.executable, str(BASELINE_ROLLING), db, backend], check=True, env=env)
    wait_state(client, ExperimentState.ROLLING)


LESS_IDLE = "proxy_instructions_per_call_less_idle"
"""The row field of `--meter instructions`: the count per call less the proxy's idle rate over the run's seconds."""


IDLE_S = 10.0
"""Seconds with no calls over which a proxy's idle instruction rate is read."""


@dataclass
class Metering:
    """How this run meters the proxies."""

    meter: Meter
    """What each run reads off a proxy's process (CPU seconds or instructions)."""
    field: str
    """The row field the ratios are taken of."""
    unit: str
    """The field's unit, as the ratios row names it (`ms`, `instructions`)."""
    idle: dict[str, float]
    """Each proxy's instructions per second with no calls; empty for CPU, where the timers' share of a run is the
    same for any proxy run at full speed."""


def start_metering(cg: Optional[Callgrind], proxies: dict[str, tuple[Proc, str]], out: Results) -> Metering:
    """CPU seconds without callgrind; with it, counting turned on in each proxy and each one's idle rate read."""
    if cg is None:
        return Metering(CPU, CPU.key, "ms", {})
    idle = {}
    for name, (px, _db) in proxies.items():
        cg.start(px.pid, name)
        before = cg.read(px.pid)
        time.sleep(IDLE_S)
        idle[name] = (cg.read(px.pid) - before) / IDLE_S
        out.emit({"figure": "idle_instructions_per_s", "proxy": name, "instructions_per_s": round(idle[name])})
    return Metering(Meter("proxy_instructions_per_call", cg.read), LESS_IDLE, "instructions", idle)


def run(px: Proc, api: str, stream: bool, args: argparse.Namespace, name: str, metering: Metering) -> dict:
    """One run: 64 new episodes (each run starts from empty histories) called `args.requests` times, then ended, as
    a client ends its episodes (a proxy holds an open episode's turns until it ends; runs left open would pile up)."""
    client = SwarmClient(px.url)
    episodes = [client.begin_episode(discard_episode_timeout=3600) for _ in range(64)]
    route, body = BODIES[api]
    proxy_overhead.BODY = body  # `load` sends this body
    keys = [key.api_key for _uuid, key in episodes]
    meter = metering.meter
    row = measure(name, px.url + route, keys, px.pid, stream, args.concurrency, args.requests, meter)
    for uuid, _key in episodes:
        client.abort_episode(uuid)
    if name in metering.idle:
        row[LESS_IDLE] = round(row[meter.key] - metering.idle[name] * row["seconds"] / args.requests)
    return {**row, "api": api}


def pin(proxies: list[int], others: list[int]) -> None:
    """The proxies on the first CPU, the stub and the load on the others (where there are others): a proxy's CPU
    per call then varies less with where the scheduler put it next to the load (which shares its caches)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return
    for pids, where in ((proxies, cpus[:1]), (others, cpus[1:])):
        for pid in pids:
            for thread in os.listdir(f"/proc/{pid}/task"):  # every thread a process has started so far
                os.sched_setaffinity(int(thread), where)


Cpu = dict[tuple[str, str], list[float]]
"""CPU ms (or instructions) per call of each (proxy, API), one per round."""


def measure_rounds(
    proxies: dict[str, tuple[Proc, str]], stream: bool, args: argparse.Namespace, metering: Metering, out: Results
) -> Cpu:
    """`args.rounds` rounds of every (proxy, API), the proxies taking turns within a round (the others' chat first,
    this tree's last): one proxy measured on a busier moment of the machine than another shows in one round, not
    in all."""
    cpu: Cpu = {}
    for _ in range(args.rounds):
        for name, (px, _db) in reversed(proxies.items()):
            for api in ("chat", "responses", "messages") if name == "head" else ("chat",):
                row = run(px, api, stream, args, name, metering)
                cpu.setdefault((name, api), []).append(row[metering.field])
                out.emit(row)
    return cpu


def ratios(cpu: Cpu, unit: str) -> dict[str, float]:
    """Medians over the rounds: each API's CPU per call over chat's, and this tree's chat over the baseline's (the
    ratio of the medians, and the median of each round's ratio)."""
    med = {key: statistics.median(values) for key, values in cpu.items()}
    head_chat = med["head", "chat"]
    out = {f"{api}_over_chat": round(med["head", api] / head_chat, 3) for api in ("responses", "messages")}
    out[f"head_chat_{unit}"] = round(head_chat, 3)
    for other in ("variant", "baseline"):
        if (other, "chat") in med:
            out[f"{other}_chat_{unit}"] = round(med[other, "chat"], 3)
    if ("baseline", "chat") in med:
        for name in ("head", "variant"):
            if (name, "chat") in med:
                out[f"{name}_chat_over_baseline_chat"] = round(med[name, "chat"] / med["baseline", "chat"], 3)
                # each round's own ratio (both measured minutes apart), then their median: drift between rounds cancels
                paired = [h / b for h, b in zip(cpu[name, "chat"], cpu["baseline", "chat"])]
                out[f"{name}_chat_over_baseline_chat_paired"] = round(statistics.median(paired), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every (proxy, API); the ratios are medians")
    ap.add_argument("--baseline", default=None, help="a git ref whose proxy to compare chat calls with")
    ap.add_argument(
        "--variant",
        default=None,
        help="options of a third proxy from this tree, compared on chat calls: '--gc-young-threshold=700'",
    )
    ap.add_argument("--meter", choices=("cpu", "instructions"), default="cpu", help="what a call costs the proxy")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ajet-api-cost-"))
    cg = Callgrind(tmp) if args.meter == "instructions" else None
    stub = start_stub(tmp)
    trees = {"head": REPO}
    if args.baseline:
        wt = tmp / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(wt), args.baseline],
            check=True,
            capture_output=True,
        )
        trees["baseline"] = wt
    extra = {"variant": args.variant.split()} if args.variant else {}
    if args.variant:
        trees["variant"] = REPO
    proxies = {
        name: start_proxy_from(tmp, tree, name, extra.get(name, ()), cg.prefix(name) if cg else ())
        for name, tree in trees.items()
    }
    pin([px.pid for px, _db in proxies.values()], [stub.pid, os.getpid()])
    results = Results("api_cost")
    try:
        for name, (px, db) in proxies.items():
            roll(px, trees[name], db, stub.url)
        time.sleep(1.0)
        metering = start_metering(cg, proxies, results)
        for stream in (False, True):
            cpu = measure_rounds(proxies, stream, args, metering, results)
            figure = {"figure": f"{args.meter}_ratios", "stream": stream, **ratios(cpu, metering.unit)}
            figure["baseline"] = args.baseline
            results.emit({**figure, "variant": args.variant} if args.variant else figure)
    finally:
        for px, _db in proxies.values():
            px.close()
        stub.close()
        if "baseline" in trees:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees["baseline"])], capture_output=True
            )


if __name__ == "__main__":
    main()

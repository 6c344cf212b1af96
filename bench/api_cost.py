"""The proxy's CPU per call by API, and against an earlier commit, side by side in one run.

One vLLM-format stub backend; one ajet-proxy from this tree, and (with `--baseline REF`) one from commit
REF, checked out in a temporary git worktree and run from it. Each proxy gets plain and streamed chat
calls; this tree's also gets Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`) calls
asking the same thing, each run on 64 episodes of its own (so no run inherits another's history), the baseline's
first. One JSON line per (proxy, API, stream): CPU ms per call, req/s, p50/p99; then the ratios: this tree's chat
over the baseline's, and each API's over chat's, medians of `--rounds` rounds. Rows are appended to
`bench/results/api_cost.jsonl`.

Usage: python -m bench.api_cost [--requests 2000] [--concurrency 32] [--rounds 3] [--baseline 78a54de]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]

from ajet import SwarmClient
from ajet.types import ExperimentState
from ajet_store import sqlite_url
from bench import proxy_overhead
from bench.proxy_overhead import measure
from bench.results import Results
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


def start_proxy_from(tmp: Path, tree: Path, name: str) -> tuple[Proc, list[str]]:
    """`ajet-proxy start` run from the packages of `tree` (this checkout, or a baseline worktree), ROLLING."""
    db = sqlite_url(tmp / f"{name}.db")
    port = free_port()
    env = offline_env(PYTHONPATH=os.pathsep.join(str(tree / d) for d in ("sdk", "proxy", "trainer")))
    px = Proc(
        [sys.executable, "-m", "ajet_proxy.cli", "start", "--port", str(port), "--db", db, "--log-level", "warning"],
        f"http://127.0.0.1:{port}",
        "/health",
        tmp / f"{name}.log",
        env=env,
    )
    return px, db


ROLLING = """
import sys
import ajet.types as wire
import ajet_store.types as rows
from ajet_store import Store
st = Store(sys.argv[1])
engine = (getattr(rows, "RegisteredEngine", None) or rows.Deployment)("stub-0", sys.argv[2] + "/v1", "stub-model", 0)
(getattr(st, "register_engines", None) or st.register_deployments)([engine])
state = getattr(wire, "ExperimentState", None) or wire.EngineState
st.transition(state.ROLLING, allowed_from=[state.BOOTING, state.ROLLING])
"""
"""What the trainer does at BOOTING, in a tree's own store code (a baseline's store is of its own schema); it
speaks the words of this tree and of the trees before the glossary."""


def roll(px: Proc, tree: Path, db: str, backend: str) -> None:
    """Bring a proxy to ROLLING on the stub backend."""
    client = SwarmClient(px.url)
    # only the fields every version knows: a baseline proxy refuses job fields added after it
    httpx.post(px.url + "/swarm/sync_train_config", json={"job": {"batch_size": 1, "num_repeat": 1}}).raise_for_status()
    client.start_engine()
    env = offline_env(PYTHONPATH=os.pathsep.join(str(tree / d) for d in ("sdk", "proxy", "trainer")))
    subprocess.run([sys.executable, "-c", ROLLING, db, backend], check=True, env=env)
    wait_state(client, ExperimentState.ROLLING)


def fresh_keys(px: Proc, n_keys: int = 64) -> list[str]:
    """The keys of `n_keys` new episodes: each run starts from empty histories, whatever ran before it."""
    client = SwarmClient(px.url)
    return [client.begin_episode(discard_episode_timeout=3600)[1].api_key for _ in range(n_keys)]


def run(px: Proc, api: str, stream: bool, conc: int, n: int, name: str) -> dict:
    keys = fresh_keys(px)
    route, body = BODIES[api]
    proxy_overhead.BODY = body  # `load` sends this body
    row = measure(name, px.url + route, keys, px.pid, stream, conc, n)
    return {**row, "api": api}


Cpu = dict[tuple[str, str], list[float]]
"""CPU ms per call of each (proxy, API), one per round."""


def measure_rounds(proxies: dict[str, tuple[Proc, str]], stream: bool, args: argparse.Namespace, out: Results) -> Cpu:
    """`args.rounds` rounds of every (proxy, API), the proxies taking turns within a round (the baseline's chat
    first): one proxy measured on a busier moment of the machine than the other shows in one round, not in all."""
    cpu: Cpu = {}
    for _ in range(args.rounds):
        for name, (px, _db) in reversed(proxies.items()):
            for api in ("chat", "responses", "messages") if name == "head" else ("chat",):
                row = run(px, api, stream, args.concurrency, args.requests, name)
                cpu.setdefault((name, api), []).append(row["proxy_cpu_ms_per_call"])
                out.emit(row)
    return cpu


def ratios(cpu: Cpu) -> dict[str, float]:
    """Medians over the rounds: each API's CPU per call over chat's, and this tree's chat over the baseline's."""
    med = {key: statistics.median(values) for key, values in cpu.items()}
    head_chat = med["head", "chat"]
    out = {f"{api}_over_chat": round(med["head", api] / head_chat, 3) for api in ("responses", "messages")}
    out["head_chat_ms"] = round(head_chat, 3)
    if ("baseline", "chat") in med:
        out["baseline_chat_ms"] = round(med["baseline", "chat"], 3)
        out["head_chat_over_baseline_chat"] = round(head_chat / med["baseline", "chat"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every (proxy, API); the ratios are medians")
    ap.add_argument("--baseline", default=None, help="a git ref whose proxy to compare chat calls with")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ajet-api-cost-"))
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
    proxies = {name: start_proxy_from(tmp, tree, name) for name, tree in trees.items()}
    results = Results("api_cost")
    try:
        for name, (px, db) in proxies.items():
            roll(px, trees[name], db, stub.url)
        time.sleep(1.0)
        for stream in (False, True):
            cpu = measure_rounds(proxies, stream, args, results)
            results.emit({"figure": "cpu_ratios", "stream": stream, **ratios(cpu), "baseline": args.baseline})
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

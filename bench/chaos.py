"""A chaos soak: three experiments on one swarm (two proxy workers, a trainer, PostgreSQL) under client load, while a
seeded schedule throws faults at it; then an audit of what the clients were told against what the store kept.

    python -m bench.chaos [--minutes 20] [--seed 0] [--clients 2] [--fault-every 60] [--faults NAME ...]

Faults (`bench/chaos_cluster.py`), each at least once, in a seeded order, `--fault-every` seconds apart: SIGKILL of a
proxy worker, SIGKILL of the trainer (started again after 5 s, as a supervisor would), SIGSTOP of the trainer for
20 s, a PostgreSQL restart, PostgreSQL's disk full for 10 s, a client that floods one experiment for 30 s. Load
(`bench/chaos_load.py`): `--clients` threads per experiment, each playing letters episodes (begin, a call, end).
After the soak the clients stop, send again any reward the swarm could not take, and the trainer gets
`--settle-s` to take the batches it can. The audit (`bench/chaos_audit.py`): every call a client saw answered is in
the store, every acknowledged end is there with its reward, every such episode trained exactly once or is
untrainable with a reason (or still pending a batch), and the other experiments' p99 call latency during the
flood against outside it. One row per experiment and one for the soak (`bench/results/chaos.jsonl`). Needs root
(a tmpfs for PostgreSQL's disk) and PostgreSQL's binaries.
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ajet.sharing import experiment_of
from ajet_core.runtime import apply_offline_env
from bench.chaos_audit import ExperimentAudit, StoredEpisode, audit_experiment, starvation
from bench.chaos_cluster import FAULTS, Cluster
from bench.chaos_load import Load, Played
from bench.results import emit

apply_offline_env()

from ajet_store import Store, experiment_store  # noqa: E402

BENCH = "chaos"


def schedule(seed: int, seconds: float, every: float, faults: tuple[str, ...]) -> list[tuple[float, str]]:
    """(seconds from the start, fault): every `every` seconds, the faults in a seeded order, each at least once
    (the soak is made long enough), cycling while time is left."""
    rng = random.Random(seed)
    count = max(len(faults), math.ceil(seconds / every) - 1)  # each before the end, but each at least once
    order: list[str] = []
    while len(order) < count:
        batch = list(faults)
        rng.shuffle(batch)
        order += batch
    return [(every * (i + 1), name) for i, name in enumerate(order[:count])]


def stored_of(store: Store) -> tuple[dict[str, StoredEpisode], dict[int, int]]:
    """An experiment's episodes as the audit reads them, and each step's episode count."""
    out = {}
    for row in store.iter_episodes():
        answered = sum(1 for c in store.calls(row.uuid) if c.response is not None and c.error is None)
        out[row.uuid] = StoredEpisode(row.status.value, row.reward, row.consumed_step, row.untrainable_reason,
                                      answered)  # fmt: skip
    return out, {s.step: s.num_episodes for s in store.steps()}


def audit_all(db: str, played: dict[str, Played]) -> dict[str, ExperimentAudit]:
    """Each experiment's audit, its store found by its job's name (the first synced is the first store's)."""
    first, out = Store(db), {}
    try:
        first_job = first.experiment().job
        for short, p in played.items():
            name = f"letters/{short}"
            own = first_job is not None and experiment_of(first_job) == name
            store = first if own else experiment_store(first, name)
            stored, steps = stored_of(store)
            out[short] = audit_experiment(p.acked_calls, p.acked_ends, stored, steps)
            if store is not first:
                store.close()
    finally:
        first.close()
    return out


def total_steps(db: str) -> int:
    """Steps recorded by every experiment of the swarm."""
    first = Store(db)
    try:
        n = len(first.steps())
        for entry in first.experiment_entries():
            store = experiment_store(first, entry.name)
            n += len(store.steps())
            store.close()
        return n
    finally:
        first.close()


def settle(db: str, quiet_s: float, limit_s: float) -> None:
    """Wait until no experiment recorded a step for `quiet_s` seconds (at most `limit_s`): the batches that can be
    trained are."""
    deadline, last, seen = time.monotonic() + limit_s, time.monotonic(), -1
    while time.monotonic() < deadline and time.monotonic() - last < quiet_s:
        steps = total_steps(db)
        if steps != seen:
            seen, last = steps, time.monotonic()
        time.sleep(2.0)


def soak(args: argparse.Namespace) -> dict[str, object]:
    """One soak; the soak's row (the experiments' rows are emitted as they are audited)."""
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="ajet-chaos-")))
    try:
        load = Load(cluster.url, args.clients)
        load.start()
        t0, plan = time.monotonic(), schedule(args.seed, args.minutes * 60, args.fault_every, tuple(args.faults))
        for at, fault in plan:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            cluster.fault(fault, load.flood)
        time.sleep(max(0.0, t0 + args.minutes * 60 - time.monotonic()))
        load.finish()
        settle(cluster.db, quiet_s=args.settle_s / 3, limit_s=args.settle_s)
        audits = audit_all(cluster.db, load.played)
        for name, a in audits.items():
            emit(BENCH, {"figure": "experiment", "experiment": name, "seed": args.seed, **_row(a),
                         "failed": load.played[name].failed, "failed_why": load.played[name].why})  # fmt: skip
        calls = [c for p in load.played.values() for c in p.latencies]
        row = {"figure": "soak", "seed": args.seed, "minutes": args.minutes, "faults": [f for _, f in plan],
               "lost_calls": sum(a.lost_calls for a in audits.values()),
               "lost_ends": sum(a.lost_ends for a in audits.values()),
               "trained_twice": sum(a.trained_twice for a in audits.values()),
               "clean": all(a.clean for a in audits.values()),
               **starvation(calls, "ea", load.flood_windows)}  # fmt: skip
        emit(BENCH, row)
        return row
    finally:
        cluster.close()


def _row(a: ExperimentAudit) -> dict[str, object]:
    return {**{k: v for k, v in asdict(a).items() if k != "untrainable"}, "untrainable": dict(a.untrainable),
            "clean": a.clean}  # fmt: skip


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clients", type=int, default=2, help="threads playing each experiment")
    ap.add_argument("--fault-every", type=float, default=60.0, help="seconds between two faults")
    ap.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    ap.add_argument("--settle-s", type=float, default=120.0, help="the most the trainer gets after the load stops")
    return ap


def main() -> None:
    soak(parser().parse_args())


if __name__ == "__main__":
    main()

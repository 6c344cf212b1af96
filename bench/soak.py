"""A long soak: two experiments on one swarm under steady client load for hours, the resources of each process
sampled as it goes, and each series' slope per hour and per million calls.

    python -m bench.soak [--minutes 120] [--sample-every 300] [--clients 1] [--pace 0] [--workers 1]

The swarm: `ajet-proxy start` and `ajet-trainer start` on a SQLite store (two experiments: the letters jobs of
tests/support/letters_clients.py, LoRA on one base), both given a temporary folder of their own (TMPDIR), so what
they leave there is theirs. The load (`bench/chaos_load.py`): `--clients` threads per experiment, each playing
episodes (begin, a call, end) one after another, `--pace` seconds apart. Every `--sample-every` seconds
`bench/soak_sample.py` looks at each process tree's resident memory, descriptors and threads, the store's size, the
checkpoint folder's and the temporary folders' entries (the samples also go to `samples.jsonl` in the soak's folder
as they are taken). At the end the load stops; the swarm at rest must hold no descriptor of a deleted file and no
CLOSE_WAIT socket, and once stopped it must leave nothing in its temporary folder. One row a run
(`bench/results/soak.jsonl`): every series' first, last and largest value and its slopes after `--warmup-min`, and
what was left over.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ajet_core.runtime import apply_offline_env
from bench.chaos_load import Load
from bench.results import emit
from bench.soak_sample import Sample, entries, leftovers, take, trends

apply_offline_env()

from ajet_store import sqlite_url  # noqa: E402
from tests.support.procs import Trainer, offline_env, start_proxy  # noqa: E402

BENCH = "soak"
EXPERIMENTS = ("ea", "eb")
"""The two experiments of the swarm (letters jobs)."""
REST_S = 60.0
"""The most a swarm at rest gets to close what the load opened (the check polls; it ends when nothing is left)."""


class SoakSwarm:
    """A proxy and a trainer on a SQLite store in `work`, with their own temporary folder; `close` ends them."""

    def __init__(self, work: Path, workers: int):
        self.work = work
        self.tmp, self.store_dir, self.exp_dir = work / "tmp", work / "store", work / "exp"
        self.tmp.mkdir()
        self.store_dir.mkdir()
        self.db = sqlite_url(self.store_dir / "swarm.db")
        self.proxy = start_proxy(work, self.db, "--workers", str(workers), "--host", "127.0.0.1",
                                 env=offline_env(TMPDIR=str(self.tmp)))  # fmt: skip
        self.url = self.proxy.url
        self.trainer = Trainer(work, self.db, self.exp_dir, TMPDIR=str(self.tmp))

    def roles(self) -> dict[str, int]:
        """Each server role's root process."""
        return {"proxy": self.proxy.pid, "trainer": self.trainer.pid}

    def sample(self, at_s: float, calls: int, client_pid: int) -> Sample:
        return take(at_s, calls, {**self.roles(), "client": client_pid}, self.store_dir, self.exp_dir, self.tmp)

    def close(self) -> None:
        self.trainer.close(60)
        self.proxy.close(60)


def at_rest(swarm: SoakSwarm) -> dict[str, list[str]]:
    """What the swarm still holds that its owner is gone for, polled until nothing (at most `REST_S`)."""
    deadline = time.monotonic() + REST_S
    while True:
        left = leftovers(swarm.roles())
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(2.0)


def play(swarm: SoakSwarm, load: Load, args: argparse.Namespace) -> list[Sample]:
    """The load for `args.minutes`, a sample every `args.sample_every` seconds (and one at the start and the end)."""
    samples: list[Sample] = []
    calls, t0 = 0, time.monotonic()
    end = t0 + args.minutes * 60
    with (swarm.work / "samples.jsonl").open("a") as log:
        while True:
            calls += load.drain()
            sample = swarm.sample(time.monotonic() - t0, calls, os.getpid())
            samples.append(sample)
            log.write(json.dumps(asdict(sample)) + "\n")
            log.flush()
            print(f"soak {sample.at_s:.0f}s calls={calls} {sample.values}", file=sys.stderr, flush=True)
            if time.monotonic() >= end:
                return samples
            time.sleep(max(0.0, min(args.sample_every, end - time.monotonic())))


def soak(args: argparse.Namespace) -> dict[str, object]:
    """One soak; its row."""
    work = Path(tempfile.mkdtemp(prefix="ajet-soak-"))
    swarm = SoakSwarm(work, args.workers)
    try:
        load = Load(swarm.url, args.clients, EXPERIMENTS, pace=args.pace)
        load.start()
        samples = play(swarm, load, args)
        load.finish()
        held = at_rest(swarm)
        rest = swarm.sample(samples[-1].at_s, samples[-1].calls, os.getpid())
    finally:
        swarm.close()
    left_tmp = sorted(p.name for p in swarm.tmp.iterdir())
    row = {"figure": "soak", "minutes": args.minutes, "experiments": len(EXPERIMENTS), "clients": args.clients,
           "pace_s": args.pace,
           "workers": args.workers, "samples": len(samples), "sample_every_s": args.sample_every,
           "warmup_min": args.warmup_min, "calls": samples[-1].calls,
           "episodes_failed": {n: p.failed for n, p in load.played.items()},
           "series": trends(samples, args.warmup_min * 60), "at_rest": rest.values, **held,
           "tmp_left": left_tmp, "tmp_left_count": entries(swarm.tmp)}  # fmt: skip
    emit(BENCH, row)
    if args.out:
        Path(args.out).write_text(json.dumps(row))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=120.0)
    ap.add_argument("--sample-every", type=float, default=300.0, help="seconds between two samples")
    ap.add_argument("--warmup-min", type=float, default=10.0, help="minutes left out of the slopes")
    ap.add_argument("--clients", type=int, default=1, help="threads playing each experiment")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds a thread waits after each episode (0: none)")
    ap.add_argument("--workers", type=int, default=1, help="the proxy's worker processes")
    ap.add_argument("--keep", action="store_true", help="keep the soak's folder (logs, store, samples.jsonl)")
    ap.add_argument("--out", help="also write the row to this file (JSON)")
    return ap


def main() -> None:
    soak(parser().parse_args())


if __name__ == "__main__":
    main()

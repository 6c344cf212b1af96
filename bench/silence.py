"""A hung trainer, with the shipped defaults: how long from its SIGSTOP until the swarm refuses a begin, and until a
client's `begin_episode` raises, the SDK's default against the former 120 s of its own (`trainer_max_silence=120`),
both in one run.

    python -m bench.silence

A proxy and a trainer (`ajet-proxy start`, `ajet-trainer start`, embedded engine, builtin:tiny) on a fresh SQLite
store, ROLLING. The trainer is stopped with SIGSTOP (a hang: its process stays, its heartbeat ends). From then, one
thread begins episodes with raw HTTP every 0.2 s (each admitted one aborted at once) until the first is refused
(503 `TrainerUnresponsive`); the SDK's clients call `begin_episode` in a loop the same way until it raises. One row:
the seconds from the SIGSTOP to the first refused begin, to each client's raise, and the episodes admitted during
the hang; then the ratio of the two clients' waits.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import httpx

from ajet import AgentJetJob, SwarmClient, TrainerUnresponsive
from ajet.types import ExperimentState
from ajet_store import sqlite_url
from bench.results import emit
from tests.support.procs import Trainer, start_proxy
from tests.support.rolling import wait_state

BENCH = "silence"


def until_refused(url: str, t0: float, admitted: list[str]) -> float:
    """Seconds from `t0` until a raw begin is refused (each admitted one aborted, its uuid kept)."""
    while True:
        r = httpx.post(f"{url}/swarm/begin_episode", json={}, timeout=60)
        if r.status_code == 503 and r.json().get("error") == "TrainerUnresponsive":
            return time.monotonic() - t0
        if r.status_code == 200:
            uuid = r.json()["episode_uuid"]
            admitted.append(uuid)
            httpx.post(f"{url}/swarm/abort_episode", json={"episode_uuid": uuid}, timeout=60)
        time.sleep(0.2)


def until_raised(client: SwarmClient, t0: float) -> float:
    """Seconds from `t0` until the client's `begin_episode` raises `TrainerUnresponsive`."""
    while True:
        try:
            uuid, _creds = client.begin_episode()
        except TrainerUnresponsive:
            return time.monotonic() - t0
        client.abort_episode(uuid)
        time.sleep(0.2)


def measure(tmp: Path) -> dict[str, float]:
    """One hang: the figures of `silence` from a SIGSTOP of a ROLLING trainer."""
    db = sqlite_url(tmp / "silence.db")
    proxy = start_proxy(tmp, db)
    trainer = Trainer(tmp, db, tmp / "exp")
    results: dict[str, float] = {}
    try:
        setup = SwarmClient(proxy.url, verbose=False)
        setup.auto_sync_train_config_and_start_engine(AgentJetJob(model="builtin:tiny", batch_size=64, num_repeat=1))
        wait_state(setup, ExperimentState.ROLLING, timeout=300)
        results["trainer_timeout_s"] = float(setup.get_engine_status().trainer_timeout_s or 0.0)
        admitted: list[str] = []
        default, former = (SwarmClient(proxy.url, verbose=False, trainer_max_silence=s) for s in (None, 120.0))
        os.kill(trainer.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=lambda: results.__setitem__("refused_s", until_refused(proxy.url, t0, admitted))),
            threading.Thread(target=lambda: results.__setitem__("sdk_default_s", until_raised(default, t0))),
            threading.Thread(target=lambda: results.__setitem__("sdk_former_120_s", until_raised(former, t0))),
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(600)
        results["raw_begins_admitted"] = float(len(admitted))
    finally:
        _resume(trainer.pid)
        trainer.close()
        proxy.close()
    return results


def _resume(pid: Optional[int]) -> None:
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(Path(tmp))
    emit(BENCH, {"figure": "sigstop", **{k: round(v, 2) for k, v in r.items()}})
    emit(BENCH, {"figure": "ratio", "sdk_former_over_default": round(r["sdk_former_120_s"] / r["sdk_default_s"], 2)})


if __name__ == "__main__":
    main()

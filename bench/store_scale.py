"""Re-scoring and replay at scale (issue 52): throughput and peak memory on a store of 1,000,000 calls, on SQLite and
on PostgreSQL, beside the same on a store a tenth its size.

Each store is filled through the real write path (`Store.begin_episode`, `write_calls`, `end_episode`,
`record_step`): groups of `--group` episodes on one task, `--tasks` groups a step, `--calls-per-episode` calls of
`--body-bytes` each, every step recorded (the episodes trained). Then, each in a child process of its own so that
its peak resident memory (`ru_maxrss`) is its own:
- `rescore`: `ajet_proxy.rescore.rescore` over every training episode (the function reads each episode's calls, as
  a reward function does), pages of 64;
- `replay`: `ajet_store.replay.ReplayImport` of the first `--replay-steps` steps' groups into an empty store of the
  same kind (every call copied with its ids and log-probs), 256 episodes a page, as the trainer runs it.

One row per phase, backend and size (`seconds`, per-second rates, `peak_rss_mb`), and one `memory` row per phase and
backend: the peak at the full size over the peak at a tenth (about 1: memory does not grow with the store).

Usage: python -m bench.store_scale [--calls 1000000] [--backends sqlite postgresql]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ajet import AgentJetJob
from ajet.rescore_types import StoredEpisode
from ajet.types import ExperimentState
from ajet_store import EpisodeSelection, Store, sqlite_url
from ajet_store.types import CallRecord
from bench.results import emit as emit_row

REPO = Path(__file__).resolve().parents[1]


def emit(**row: Any) -> None:
    emit_row("store_scale", row)


def answer_length(episode: StoredEpisode) -> float:
    """The re-scoring's reward function: the final answer's length, over 100 (it reads every call of the episode)."""
    return len(episode.final_answer or "") / 100


def episode_calls(uuid: str, per_episode: int, request: str, response: str, now: float) -> list[CallRecord]:
    return [
        CallRecord(uuid, s, request, response, list(range(60)), list(range(30)), [-0.5] * 30, "stop", 0, "d", 5.0, now)
        for s in range(per_episode)
    ]


def fill(st: Store, calls: int, per_episode: int, group: int, tasks: int, body_bytes: int) -> int:
    """Fill the store; returns its episodes. Every step's batch is `tasks` groups of `group` episodes."""
    st.sync_job(AgentJetJob(batch_size=tasks, num_repeat=group))
    st.transition(ExperimentState.ROLLING)
    text = "q" * (body_bytes * 2 // 3)
    request = json.dumps({"messages": [{"role": "user", "content": text}]})
    response = json.dumps({"choices": [{"message": {"role": "assistant", "content": "a" * (body_bytes // 3)}}]})
    episodes, per_step, now = calls // per_episode, group * tasks, time.time()
    for step, first in enumerate(range(0, episodes, per_step), start=1):
        uuids = [f"ep{i:08d}" for i in range(first, min(first + per_step, episodes))]
        for u in uuids:
            st.begin_episode(u, "h" + u, "bench", "train", 3600)
        st.write_calls([c for u in uuids for c in episode_calls(u, per_episode, request, response, now)])
        for k, u in enumerate(uuids):
            st.end_episode(u, "bench", f"s{step}t{k // group}", float(k % 2), None, {})
        st.record_step(step, step, uuids, 0.5, {"loss": 0.1})
    return episodes


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def measured(work: Callable[[], int]) -> dict[str, Any]:
    """`work()` (it returns the episodes it handled) timed, with this process's peak memory before and after."""
    before = peak_rss_mb()
    t0 = time.perf_counter()
    episodes = work()
    return {"episodes": episodes, "seconds": round(time.perf_counter() - t0, 1), "peak_rss_mb": peak_rss_mb(),
            "rss_before_mb": before}  # fmt: skip


def phase_rescore(url: str) -> dict[str, Any]:
    from ajet_proxy.rescore import rescore

    st = Store(url)
    try:
        name = "bench.store_scale:answer_length"
        return measured(lambda: rescore(st, answer_length, name, EpisodeSelection()).scored)
    finally:
        st.close()


def phase_replay(url: str, target_url: str, steps: int) -> dict[str, Any]:
    from ajet_store.replay import ReplayImport

    source, target = Store(url), Store(target_url)
    try:
        target.sync_job(AgentJetJob(experiment_name="replay"))
        target.transition(ExperimentState.ROLLING)  # the trainer imports while its replay experiment rolls

        def replay() -> int:
            imp = ReplayImport(source, target, "bench", EpisodeSelection(last_step=steps), 0)
            while not imp.done:
                imp.step(256)
            return imp.copied

        return measured(replay)
    finally:
        source.close()
        target.close()


def child(*args: str) -> dict[str, Any]:
    """A phase in a child process of its own (its peak memory is the phase's): its one JSON line."""
    res = subprocess.run([sys.executable, "-m", "bench.store_scale", "--phase", *args], capture_output=True,
                         text=True, cwd=REPO)  # fmt: skip
    if res.returncode != 0:
        raise SystemExit(f"phase {args[0]} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def stores(tmp: Path, name: str, pg_url: Optional[str]) -> tuple[str, str]:
    """Two empty stores' URLs (the source and the replay's target): SQLite files, or databases of the PostgreSQL
    server at `pg_url`."""
    if pg_url is None:
        return sqlite_url(tmp / f"{name}.db"), sqlite_url(tmp / f"{name}-replay.db")
    from tests.support.postgres import fresh_database  # measuring runs only: a phase's child imports no more

    return fresh_database(pg_url, name), fresh_database(pg_url, f"{name}_replay")


def measure(backend: str, calls: int, args: argparse.Namespace, tmp: Path, pg_url: Optional[str]) -> dict[str, float]:
    """Fill, re-score and replay one store; emits the rows; returns each phase's peak memory."""
    url, target = stores(tmp, f"s{calls}", pg_url)
    st = Store(url)
    t0 = time.perf_counter()
    try:
        episodes = fill(st, calls, args.calls_per_episode, args.group, args.tasks, args.body_bytes)
    finally:
        st.close()
    emit(figure="fill", backend=backend, calls=calls, episodes=episodes, seconds=round(time.perf_counter() - t0, 1))
    scored = child("rescore", url)
    emit_rates("rescore", backend, calls, scored, args.calls_per_episode)
    replayed = child("replay", url, target, str(args.replay_steps))
    emit_rates("replay", backend, calls, replayed, args.calls_per_episode)
    return {"rescore": scored["peak_rss_mb"], "replay": replayed["peak_rss_mb"]}


def emit_rates(phase: str, backend: str, calls: int, out: dict[str, Any], per_episode: int) -> None:
    """A phase's row: what its child measured, with its episodes and calls per second."""
    rates = {"episodes_per_s": round(out["episodes"] / out["seconds"], 1),
             "calls_per_s": round(out["episodes"] * per_episode / out["seconds"], 1)}  # fmt: skip
    emit(figure=phase, backend=backend, calls=calls, **out, **rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--calls-per-episode", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--body-bytes", type=int, default=600)
    ap.add_argument("--replay-steps", type=int, default=100, help="the steps whose groups the replay copies")
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    ap.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        kind, *rest = args.phase
        out = phase_rescore(rest[0]) if kind == "rescore" else phase_replay(rest[0], rest[1], int(rest[2]))
        print(json.dumps(out))
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    from tests.support.postgres import PgServer

    with tempfile.TemporaryDirectory(prefix="ajet-scale-") as tmp:
        for backend in args.backends:
            pg = PgServer() if backend == "postgresql" else None
            try:
                pg_url = pg.url if pg is not None else None
                small = measure(backend, args.calls // 10, args, Path(tmp), pg_url)
                full = measure(backend, args.calls, args, Path(tmp), pg_url)
            finally:
                if pg is not None:
                    pg.close()
            for phase in ("rescore", "replay"):
                ratio = round(full[phase] / small[phase], 2)
                emit(figure="memory", backend=backend, phase=phase, calls=args.calls, peak_rss_mb=full[phase],
                     peak_rss_mb_at_a_tenth=small[phase], full_over_tenth=ratio)  # fmt: skip


if __name__ == "__main__":
    main()

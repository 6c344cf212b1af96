"""The explorer's pages on a store of 1M calls: each page's answer time, and the newest-first episode list with
and without its index (`ix_episodes_created`, schema 11), side by side as a ratio.

Builds the store as `bench/store_growth.py` does (the real write path: episodes of 20 calls, a recorded step per
batch), serves it with `ajet-proxy explore`, and times each page over loopback (median of `--reps` requests; the
time includes the transfer, so it bounds the server's). Then drops the index on a copy of the store and times the
list again. One JSON line per figure.

Usage: python -m bench.explore_pages [--calls 1000000] [--body-bytes 500] [--reps 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import sqlalchemy as sa

from ajet_store import Store, sqlite_url
from bench.results import emit as emit_row
from bench.store_growth import build, timed
from tests.support.procs import Proc, free_port, offline_env

PAGES = {
    "runs": "/explore/",
    "live": "/explore/live",
    "step": "/explore/steps/{step}",
    "episodes_newest": "/explore/episodes",
    "episodes_page_100": "/explore/episodes?page=100",
    "episodes_of_step_by_reward": "/explore/episodes?step={step}&sort=reward",
    "episodes_by_mission_and_reward": "/explore/episodes?mission=m1&min=1&sort=reward",
    "episodes_of_a_client_none": "/explore/episodes?client=nobody",
    "group": "/explore/groups/{step}/task3",
    "episode": "/explore/episodes/ep0000500",
}
"""Each page timed, on the store's middle step."""


def emit(**row: object) -> None:
    emit_row("explore_pages", row)


def explorer(tmp: Path, url: str) -> Proc:
    port = free_port()
    argv = [str(Path(sys.executable).parent / "ajet-proxy"), "explore", "--db", url, "--port", str(port)]
    return Proc(argv, f"http://127.0.0.1:{port}", "/explore/live", tmp / f"explore-{port}.log", env=offline_env())


def time_pages(tmp: Path, url: str, step: int, reps: int, only: tuple[str, ...] = tuple(PAGES)) -> dict[str, float]:
    px = explorer(tmp, url)
    out = {}
    try:
        with httpx.Client(base_url=px.url, timeout=120) as http:
            for name in only:
                path = PAGES[name].format(step=step)
                assert http.get(path).status_code == 200, path
                out[name] = timed(lambda path=path: http.get(path), reps)
    finally:
        px.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--body-bytes", type=int, default=500)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temporary folder)")
    args = ap.parse_args()
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="ajet-explore-"))
    path = tmp / "explore.db"
    if not path.exists():
        st = Store(sqlite_url(path))
        t0 = time.perf_counter()
        build(st, args.calls, 20, args.body_bytes, 128)
        emit(figure="build", calls=args.calls, seconds=round(time.perf_counter() - t0, 1))
        st.close()
    with Store(sqlite_url(path)) as st:
        step = st.experiment().global_step // 2
    pages = time_pages(tmp, sqlite_url(path), step, args.reps)
    for name, ms in pages.items():
        emit(figure="page", page=name, ms=ms, calls=args.calls, limit_ms=300)
    bare = tmp / "no-index.db"
    shutil.copy(path, bare)
    engine = sa.create_engine(sqlite_url(bare))
    with engine.begin() as c:
        c.execute(sa.text("DROP INDEX ix_episodes_created"))
    engine.dispose()
    without = time_pages(tmp, sqlite_url(bare), step, args.reps, ("episodes_newest", "episodes_page_100"))
    for name, ms in without.items():
        emit(figure="index", page=name, with_index_ms=pages[name], without_index_ms=ms,
             without_over_with=round(ms / max(pages[name], 1e-3), 1), calls=args.calls)  # fmt: skip
    bare.unlink()


if __name__ == "__main__":
    main()

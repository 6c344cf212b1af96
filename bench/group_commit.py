"""The cost of "every answered call is in the store", side by side in one run.

One vLLM-format stub, one ajet-proxy per commit window (`--commit-window-ms`, default 0 and 2): plain
and streamed calls at each concurrency, one JSON line per (window, stream, concurrency) with the
proxy's CPU per call and p50/p99 latency, then the ratio of each window's CPU to the first's.

Usage: python -m bench.group_commit [--requests 2000] [--concurrency 32 256] [--windows-ms 0 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from bench.proxy_overhead import measure, start_middle
from bench.results import emit
from tests.support.procs import start_stub


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--windows-ms", type=float, nargs="+", default=[0.0, 2.0])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ajet-group-commit-"))
    stub = start_stub(tmp)
    proxies = {
        w: start_middle(tmp, stub, "aiohttp", 64, "--commit-window-ms", str(w), name=f"window-{w:g}")
        for w in args.windows_ms
    }
    try:
        for stream in (False, True):
            for conc in args.concurrency:
                rows = {}
                for w, (px, keys, _st) in proxies.items():
                    rows[w] = measure(
                        "ajet", px.url + "/v1/chat/completions", keys, px.pid, stream, conc, args.requests
                    )
                    emit("group_commit", {**rows[w], "commit_window_ms": w})
                base = rows[args.windows_ms[0]]["proxy_cpu_ms_per_call"]
                emit(
                    "group_commit",
                    {
                        "figure": "cpu_ratio_vs_first_window",
                        "stream": stream,
                        "concurrency": conc,
                        **{f"window_{w:g}ms": round(r["proxy_cpu_ms_per_call"] / base, 3) for w, r in rows.items()},
                    },
                )
    finally:
        for px, _keys, st in proxies.values():
            px.close()
            st.close()
        stub.close()


if __name__ == "__main__":
    main()

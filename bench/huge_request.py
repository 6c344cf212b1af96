"""Healthy calls on the embedded engine while another episode sends a huge request, beside the same calls alone.

    python -m bench.huge_request [--model builtin:tiny-bpe] [--mib 8] [--huge 1]

The engine (the trainer's embedded one, in a process of its own) serves a loop of small chat calls (4 tokens)
from one client. Two phases, side by side in one run:
- `alone`: the calls for `--seconds`;
- `beside_huge`: the same calls while `--huge` requests of one `--mib` MiB message each are sent at once
  (under the proxy's 8 MiB body limit: the engine is where it is tokenized).
One JSON line per phase (healthy calls' p50 and max latency, and for the huge ones how long their answer took
and its status), then the ratio line (max latency beside the huge requests / p50 alone). Round two measured
14,029 ms against 84 ms with the template and the tokenizer on the engine's event loop.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import threading
import time
from typing import Any

import httpx

from bench.results import emit


def _serve(model: str, out: "mp.Queue[str]") -> None:
    import torch

    from ajet.job import AgentJetJob
    from ajet_trainer.embedded.server import EmbeddedEngine
    from ajet_trainer.policy import load_policy
    from ajet_trainer.tiny_model import builtin_model_path

    torch.set_num_threads(1)
    policy, tok = load_policy(str(builtin_model_path(model)), AgentJetJob(), "cpu")
    out.put(EmbeddedEngine(policy, tok).start())
    threading.Event().wait()


def _healthy(url: str, stop: threading.Event, lat: list[float]) -> None:
    body = {"model": "policy", "messages": [{"role": "user", "content": "say a"}], "max_tokens": 4}
    with httpx.Client(timeout=600) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            c.post(f"{url}/chat/completions", json=body).raise_for_status()
            lat.append((time.perf_counter() - t0) * 1000)


def _phase(url: str, seconds: float, huge: list[dict[str, Any]]) -> dict[str, Any]:
    lat: list[float] = []
    stop = threading.Event()
    th = threading.Thread(target=_healthy, args=(url, stop, lat))
    th.start()
    time.sleep(0.5)
    lat.clear()  # warm
    answers: list[tuple[int, float]] = []

    def send(body: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
        answers.append((r.status_code, (time.perf_counter() - t0) * 1000))

    senders = [threading.Thread(target=send, args=(b,)) for b in huge]
    for s in senders:
        s.start()
    time.sleep(seconds)
    for s in senders:
        s.join()
    stop.set()
    th.join()
    return {
        "healthy_calls": len(lat),
        "healthy_p50_ms": round(statistics.median(lat), 1),
        "healthy_max_ms": round(max(lat), 1),
        "huge_status": sorted({a[0] for a in answers}),
        "huge_answer_ms": [round(a[1]) for a in answers],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin:tiny-bpe")
    ap.add_argument("--mib", type=float, default=8.0)
    ap.add_argument("--huge", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    q: "mp.Queue[str]" = mp.Queue()
    proc = mp.Process(target=_serve, args=(args.model, q), daemon=True)
    proc.start()
    url = q.get(timeout=300)
    try:
        text = ("The quick brown fox jumps over the lazy dog 1234. " * 100_000)[: int(args.mib * 2**20) - 200]
        huge = [{"model": "policy", "messages": [{"role": "user", "content": text}], "max_tokens": 4}] * args.huge
        alone = {"phase": "alone", "model": args.model, **_phase(url, args.seconds, [])}
        emit("huge_request", alone)
        beside = {"phase": "beside_huge", "model": args.model, "mib": args.mib, "huge": args.huge,
                  **_phase(url, args.seconds, huge)}  # fmt: skip
        emit("huge_request", beside)
        ratio = beside["healthy_max_ms"] / alone["healthy_p50_ms"]
        emit("huge_request", {"ratio": "healthy_max_beside_huge / healthy_p50_alone", "value": round(ratio, 1)})
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

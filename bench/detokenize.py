"""Streaming detokenization, side by side in one run: re-decoding the whole completion on every token
(what the engine did) against `IncrementalDecoder` (tokenizers' DecodeStream), plus the stop-string check
each token pays. One JSON line per (method, completion length): total ms over the completion; then
the ratio per length.

Usage: python -m bench.detokenize [--lengths 512 2048 4096] [--model builtin:tiny]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from ajet_trainer.embedded.detok import IncrementalDecoder, first_stop
from ajet_trainer.tiny_model import resolve_model_path
from bench.results import emit

STOP = ["</answer>"]


def full_redecode(tok, ids: list[int]) -> float:
    t0 = time.perf_counter()
    seen: list[int] = []
    for i in ids:
        seen.append(i)
        text = tok.decode(seen, skip_special_tokens=False)
        any(s in text for s in STOP)
    return (time.perf_counter() - t0) * 1000


def incremental(tok, ids: list[int]) -> float:
    t0 = time.perf_counter()
    dec = IncrementalDecoder(tok, {tok.eos_token_id})
    for i in ids:
        piece = dec.push(i)
        first_stop(dec.text, STOP, len(dec.text) - len(piece))
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096])
    ap.add_argument("--model", default="builtin:tiny")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(str(resolve_model_path(args.model)))
    words = "The quick brown fox jumps over the lazy dog; 12 + 30 = 42. "
    for n in args.lengths:
        ids = tok.encode(words * (n // 8 + 1), add_special_tokens=False)[:n]
        old, new = full_redecode(tok, ids), incremental(tok, ids)
        for method, ms in (("full_redecode", old), ("incremental", new)):
            emit("detokenize", {"figure": "stream_detokenize_ms", "method": method, "tokens": n, "ms": round(ms, 2)})
        emit(
            "detokenize",
            {"figure": "stream_detokenize_ratio", "tokens": n, "full_over_incremental": round(old / new, 1)},
        )


if __name__ == "__main__":
    main()

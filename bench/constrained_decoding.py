"""Constrained decoding, side by side in one run: the embedded engine's two backends, xgrammar (vLLM's) and
outlines-core (outlines' Rust engine, the `[constrained]` extra), and the engine's sampling with each grammar
against without.

Per built-in model (char-level, byte-level BPE) and grammar (a forced call of one of two tools; a JSON object of a
schema), one JSON line per figure:
- `compile_ms`: a fresh backend's first constraint of the schema (its vocabulary read, the grammar compiled);
- `mask_us_per_token`: a random walk through the grammar, each step the allowed-token mask filled and applied to a
  logits row, then the chosen token accepted (what a decoding step adds);
- `engine_ms_per_token`: `generate_batch` on the untrained model, 8 requests of exactly 48 tokens, with an
  constraint of each backend and without; then the ratios.

Usage: python -m bench.constrained_decoding [--steps 2000]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, Optional

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from ajet import AgentJetJob
from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.grammar import BACKENDS, Grammars, GrammarSpec, TokenConstraint, grammar_spec, load_grammars
from ajet_trainer.embedded.grammar.outlines_backend import OutlinesConstraint, OutlinesGrammars
from ajet_trainer.embedded.grammar.xgrammar_backend import XgrammarConstraint, XgrammarGrammars
from ajet_trainer.embedded.types import GenRequest
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path

TOOLS = [
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "say", "parameters": {"type": "object", "properties": {
        "text": {"type": "string"}}, "required": ["text"]}}},
]  # fmt: skip
GRAMMARS = {
    "forced_call": {"tools": TOOLS, "tool_choice": "required"},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
        "required": ["answer", "confidence"]}}}},
}  # fmt: skip


def regex_constraints(backend: Grammars, regex: str, n: int) -> list[TokenConstraint]:
    """`n` constraints of a plain regex, through each backend's own regex compiler (no JSON schema spells one
    that cannot end within the measured tokens and both libraries compile)."""
    if isinstance(backend, XgrammarGrammars):
        import xgrammar as xgr

        compiled = backend.compiler.compile_regex(regex)
        return [XgrammarConstraint(xgr.GrammarMatcher(compiled), backend.vocab) for _ in range(n)]
    assert isinstance(backend, OutlinesGrammars)
    from outlines_core import Guide, Index

    index = Index(regex, backend.vocabulary)
    return [OutlinesConstraint(Guide(index), backend.vocab, backend.eos, backend.stop_ids) for _ in range(n)]


def walk(grammars: Grammars, spec: GrammarSpec, vocab: int, stop: set[int], steps: int) -> float:
    """Mean microseconds per step of a random walk (mask filled and applied, a random allowed token accepted)."""
    rng, logits = random.Random(0), torch.zeros(vocab)
    c, t0 = grammars.constraint(spec), time.perf_counter()
    for _ in range(steps):
        row = logits.clone()
        c.mask_(row)
        tok = rng.choice(torch.isfinite(row).nonzero().flatten().tolist())
        c.accept(tok)
        if tok in stop:
            c = grammars.constraint(spec)
    return (time.perf_counter() - t0) / steps * 1e6


def engine_ms_per_token(model: Any, tok: Any, grammars: Optional[Grammars]) -> float:
    """`generate_batch` of 8 seeded requests of exactly 48 tokens (no end of turn: with a grammar, one that cannot
    end within them, `[a-z ]{1000}`); ms per generated token."""
    prompt = tok.encode("Say something.", add_special_tokens=False)
    reqs = [GenRequest(prompt, 48, seed=i) for i in range(8)]
    if grammars is not None:
        for r, c in zip(reqs, regex_constraints(grammars, "[a-z ]{1000}", len(reqs))):
            r.constraint = c
    t0 = time.perf_counter()
    results = generate_batch(model, tok, reqs, set())
    assert all(len(r.token_ids) == 48 and r.error is None for r in results), [r.error for r in results]
    return (time.perf_counter() - t0) * 1000 / (8 * 48)


def compile_ms(tok: Any, vocab: int, stop: set[int], backend: str, spec: GrammarSpec) -> float:
    """A fresh backend's first constraint of `spec`: its vocabulary read and the grammar compiled."""
    t0 = time.perf_counter()
    load_grammars(tok, vocab, stop, (backend,)).constraint(spec)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in ("builtin:tiny", "builtin:tiny-bpe"):
        model, tok = load_policy(str(builtin_model_path(name)), AgentJetJob(), "cpu")
        vocab, stop = int(model.config.vocab_size), {tok.eos_token_id, tok.pad_token_id}
        backends = {b: load_grammars(tok, vocab, stop, (b,)) for b in BACKENDS}
        engine = {"unconstrained": min(engine_ms_per_token(model, tok, None) for _ in range(5))}
        engine.update({b: min(engine_ms_per_token(model, tok, g) for _ in range(5)) for b, g in backends.items()})
        for side, ms in engine.items():
            emit(
                "constrained_decoding",
                {"model": name, "figure": "engine_ms_per_token", "side": side, "ms": round(ms, 3)},
            )
        ratios = {f"{b}_over_free": round(engine[b] / engine["unconstrained"], 2) for b in backends}
        emit("constrained_decoding", {"model": name, "figure": "engine_ratio", **ratios})
        for gname, body in GRAMMARS.items():
            spec = grammar_spec(body)
            assert spec is not None
            base = {"model": name, "grammar": gname, "vocab": vocab}
            masks = {b: walk(g, spec, vocab, stop, args.steps) for b, g in backends.items()}
            for b in backends:
                ms = compile_ms(tok, vocab, stop, b, spec)
                emit("constrained_decoding", {**base, "figure": "compile_ms", "library": b, "ms": round(ms, 2)})
                us = round(masks[b], 1)
                emit("constrained_decoding", {**base, "figure": "mask_us_per_token", "library": b, "us": us})
            ratio = {"outlines_over_xgrammar_mask": round(masks["outlines-core"] / masks["xgrammar"], 2)}
            emit("constrained_decoding", {**base, "figure": "mask_ratio", **ratio})


if __name__ == "__main__":
    main()

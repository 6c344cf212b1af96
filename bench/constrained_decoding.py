"""Constrained decoding, side by side in one run: xgrammar (what the embedded engine uses, as vLLM does) against
outlines-core (outlines' Rust engine), and the engine's sampling with a grammar against without.

Per built-in model (char-level, byte-level BPE) and grammar (a forced call of one of two tools; a JSON object of a
schema), one JSON line per figure:
- `compile_ms`: turning the schema into each library's automaton for this tokenizer (once per schema);
- `mask_us_per_token`: a random walk through the grammar, each step the allowed-token mask filled and applied to a
  logits row, then the chosen token accepted (what a decoding step adds);
- `engine_ms_per_token`: `generate_batch` on the untrained model, 8 requests of exactly 48 tokens, with an
  xgrammar constraint and without; then the ratios.

Usage: python -m bench.constrained_decoding [--steps 2000]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, Optional

from ajet.utils.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

import torch

from ajet import AgentJetJob
from ajet_trainer.embedded.generation import GenRequest, generate_batch
from ajet_trainer.embedded.grammar import Grammars, TokenConstraint, grammar_spec
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


def outlines_vocabulary(tok: Any) -> Any:
    """outlines-core's vocabulary of a Hugging Face tokenizer: each token's bytes (byte-level pieces mapped back
    through GPT-2's byte alphabet), special tokens left out but the end of turn."""
    from outlines_core import Vocabulary

    alphabet = _byte_alphabet()
    special = set(tok.all_special_ids)
    pieces: dict[bytes, list[int]] = {}
    for piece, i in tok.get_vocab().items():
        if i in special:
            continue
        raw = bytes(alphabet[c] for c in piece) if all(c in alphabet for c in piece) else piece.encode()
        pieces.setdefault(raw, []).append(i)
    return Vocabulary(tok.eos_token_id, pieces)


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 bytes, inverted (a char-level piece maps to its own byte)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def outlines_regex(body: dict[str, Any]) -> str:
    """The regex outlines-core builds for the same grammar (the tool call wrapped in its tags)."""
    from outlines_core.json_schema import build_regex_from_schema

    spec = grammar_spec(body)
    assert spec is not None
    regex = build_regex_from_schema(spec.schema or '{"type": "object"}', r"")
    return r"<tool_call>" + regex + r"</tool_call>" if spec.kind == "tool_call" else regex


def walk_xgrammar(grammars: Grammars, body: dict[str, Any], vocab: int, stop: set[int], steps: int) -> float:
    """Mean microseconds per step of a random walk (mask filled and applied, a random allowed token accepted)."""
    spec, rng, logits = grammar_spec(body), random.Random(0), torch.zeros(vocab)
    assert spec is not None
    c, t0 = grammars.constraint(spec), time.perf_counter()
    for _ in range(steps):
        row = logits.clone()
        c.mask_(row)
        allowed = torch.isfinite(row).nonzero().flatten().tolist()
        tok = rng.choice(allowed)
        if tok in stop or c.matcher.is_terminated():
            c = grammars.constraint(spec)
            continue
        c.accept(tok)
    return (time.perf_counter() - t0) / steps * 1e6


def walk_outlines(index: Any, eos: int, vocab: int, steps: int) -> float:
    from outlines_core import Guide

    rng, logits, mask = random.Random(0), torch.zeros(vocab), torch.zeros((vocab + 31) // 32, dtype=torch.int32)
    bits = torch.arange(32, dtype=torch.int32)
    guide, t0 = Guide(index), time.perf_counter()
    for _ in range(steps):
        mask.zero_()
        guide.write_mask_into(mask.data_ptr(), mask.numel(), mask.element_size())
        allowed_bits = ((mask[:, None] >> bits) & 1).flatten()[:vocab].bool()
        row = logits.clone().masked_fill_(~allowed_bits, float("-inf"))
        allowed = torch.isfinite(row).nonzero().flatten().tolist()
        tok = rng.choice(allowed)
        if tok == eos or guide.is_finished():
            guide = Guide(index)
            continue
        guide.advance(tok)
    return (time.perf_counter() - t0) / steps * 1e6


def engine_ms_per_token(model: Any, tok: Any, grammars: Optional[Grammars]) -> float:
    """`generate_batch` of 8 seeded requests of exactly 48 tokens (no end of turn: with a grammar, one that cannot
    end within them, `[a-z ]{1000}`); ms per generated token."""
    import xgrammar as xgr

    prompt = tok.encode("Say something.", add_special_tokens=False)
    reqs = [GenRequest(prompt, 48, seed=i) for i in range(8)]
    if grammars is not None:
        compiled = grammars.compiler.compile_regex("[a-z ]{1000}")
        for r in reqs:
            r.constraint = TokenConstraint(xgr.GrammarMatcher(compiled), grammars.vocab)
    t0 = time.perf_counter()
    results = generate_batch(model, tok, reqs, set())
    assert all(len(r.token_ids) == 48 and r.error is None for r in results), [r.error for r in results]
    return (time.perf_counter() - t0) * 1000 / (8 * 48)


def main() -> None:
    from outlines_core import Index

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in ("builtin:tiny", "builtin:tiny-bpe"):
        model, tok = load_policy(str(builtin_model_path(name)), AgentJetJob(), "cpu")
        vocab, eos = int(model.config.vocab_size), {tok.eos_token_id, tok.pad_token_id}
        grammars = Grammars(tok, vocab, eos)
        ovocab = outlines_vocabulary(tok)
        free = min(engine_ms_per_token(model, tok, None) for _ in range(5))
        forced = min(engine_ms_per_token(model, tok, grammars) for _ in range(5))
        for side, ms in (("unconstrained", free), ("xgrammar", forced)):
            emit(
                "constrained_decoding",
                {"model": name, "figure": "engine_ms_per_token", "side": side, "ms": round(ms, 3)},
            )
        emit(
            "constrained_decoding",
            {"model": name, "figure": "engine_ratio", "constrained_over_free": round(forced / free, 2)},
        )
        for gname, body in GRAMMARS.items():
            spec = grammar_spec(body)
            assert spec is not None
            t0 = time.perf_counter()
            grammars.compiler.clear_cache()
            grammars.constraint(spec)
            x_compile = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            index = Index(outlines_regex(body), ovocab)
            o_compile = (time.perf_counter() - t0) * 1000
            x_mask = walk_xgrammar(grammars, body, vocab, eos, args.steps)
            o_mask = walk_outlines(index, tok.eos_token_id, vocab, args.steps)
            base = {"model": name, "grammar": gname, "vocab": vocab}
            for lib, ms, us in (("xgrammar", x_compile, x_mask), ("outlines_core", o_compile, o_mask)):
                emit("constrained_decoding", {**base, "figure": "compile_ms", "library": lib, "ms": round(ms, 2)})
                emit(
                    "constrained_decoding", {**base, "figure": "mask_us_per_token", "library": lib, "us": round(us, 1)}
                )
            ratio = {"outlines_over_xgrammar_mask": round(o_mask / x_mask, 2)}
            emit("constrained_decoding", {**base, "figure": "mask_ratio", **ratio})


if __name__ == "__main__":
    main()

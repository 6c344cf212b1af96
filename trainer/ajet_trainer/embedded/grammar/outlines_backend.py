"""Constrained decoding through outlines-core (outlines' Rust engine): a 2 MB wheel with no dependencies, so the
`[constrained]` extra (part of `[all]`) gives every install forced tool calls and JSON output.

outlines-core compiles a regex over a vocabulary of byte strings. `token_bytes` recovers each token's bytes from a
Hugging Face tokenizer of any of the three kinds xgrammar also reads: byte-level BPE (GPT-2's printable stand-ins
for bytes), sentencepiece with byte fallback (`▁` for a space, `<0x0A>` for a byte) and raw (a piece is its text).
Special tokens are left out (a grammar spells its tags as text); the end-of-turn tokens are allowed where the
regex may end, and only they once it must. Its JSON allows at most one blank around each `:`, `,` and bracket,
and `json_object` nests two deep (`OBJECT_SCHEMA`).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import torch

from ajet.errors import InvalidRequest
from ajet_trainer.embedded.grammar.spec import CALL_CLOSE, CALL_OPEN, GrammarSpec

EXTRA = "outlines-core==0.2.14"
"""What `pip install` needs for this backend (the `[constrained]` extra)."""

WHITESPACE = r"[ ]?"
"""The blanks outlines-core's JSON allows between tokens: none or one (json.dumps writes `, ` and `: `)."""

_SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
OBJECT_SCHEMA = json.dumps(
    {"type": "object", "additionalProperties": {"anyOf": [
        _SCALAR, {"type": "array", "items": _SCALAR}, {"type": "object", "additionalProperties": _SCALAR}]}}
)  # fmt: skip
"""`json_object`'s schema here: an object whose values are scalars, or arrays or objects of scalars. outlines-core
spells "any object" as a regex nested three deep, which takes seconds to index over a small vocabulary (5.8 s
on the built-in BPE model's 4,044 tokens, against 0.14 s for this)."""

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def token_bytes(tokenizer: Any) -> dict[int, bytes]:
    """Every non-special token's bytes, by id, as the tokenizer's decoder would write them."""
    kind = _vocab_kind(tokenizer)
    alphabet = _byte_alphabet() if kind == "byte_level" else {}
    special = set(tokenizer.all_special_ids)
    out: dict[int, bytes] = {}
    for piece, i in tokenizer.get_vocab().items():
        if i in special:
            continue
        if kind == "byte_level" and all(c in alphabet for c in piece):
            out[i] = bytes(alphabet[c] for c in piece)
        elif kind == "byte_fallback" and (m := _BYTE_PIECE.match(piece)):
            out[i] = bytes([int(m.group(1), 16)])
        elif kind == "byte_fallback":
            out[i] = piece.replace("▁", " ").encode()
        else:
            out[i] = piece.encode()
    return out


def _vocab_kind(tokenizer: Any) -> str:
    """`byte_level`, `byte_fallback` or `raw`: read off the fast tokenizer's decoder, as xgrammar reads it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = json.dumps(json.loads(backend.to_str()).get("decoder")) if backend is not None else ""
    if '"ByteLevel"' in decoder:
        return "byte_level"
    if '"ByteFallback"' in decoder or "<0x0A>" in tokenizer.get_vocab():
        return "byte_fallback"
    return "raw"


@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-ins for the 256 bytes, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class OutlinesConstraint:
    """One request's outlines-core guide, the bitmask it fills, and the end-of-turn tokens it lets end it."""

    def __init__(self, guide: Any, vocab: int, eos: int, stop_ids: torch.Tensor):
        self.guide, self.eos, self.stop_ids = guide, eos, stop_ids
        self.bitmask = torch.zeros((vocab + 31) // 32, dtype=torch.int32)
        self._bits = torch.arange(32, dtype=torch.int32)
        self.ended = False
        self.may_end = False
        """Whether the last mask let an end of turn through (the regex may end where the guide is)."""

    def mask_(self, logits: torch.Tensor) -> None:
        allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
        if not self.ended:
            self.bitmask.zero_()
            self.guide.write_mask_into(self.bitmask.data_ptr(), self.bitmask.numel(), self.bitmask.element_size())
            allowed = ((self.bitmask[:, None] >> self._bits) & 1).flatten()[: logits.shape[-1]].bool()
        self.may_end = self.ended or bool(allowed[self.eos])
        if self.may_end:  # the regex may end here: any end of turn may end it
            allowed[self.stop_ids] = True
        logits.masked_fill_(~allowed.to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        if int(token) in self.stop_ids.tolist():
            if not self.may_end:
                raise RuntimeError(f"the grammar cannot end at token {token}, which was sampled under its mask")
            self.ended = True
        elif self.ended or not self.guide.accepts_tokens([token]):
            raise RuntimeError(f"the grammar refused token {token}, which was sampled under its mask")
        else:
            self.guide.advance(token, return_tokens=False)


class OutlinesGrammars:
    """outlines-core's index of each spec's regex over one tokenizer's vocabulary (cached by spec)."""

    backend = "outlines-core"

    def __init__(self, tokenizer: Any, vocab: int, stop_ids: set[int]):
        from outlines_core import Vocabulary  # ImportError: `grammar.load_grammars` names what to install

        self.vocab = vocab
        self.eos = min(stop_ids)  # the vocabulary's one end token; every stop id is allowed where it is
        self.stop_ids = torch.tensor(sorted(stop_ids), dtype=torch.long)
        pieces: dict[bytes, list[int]] = {}
        for i, raw in token_bytes(tokenizer).items():
            if i < vocab and i not in stop_ids and raw:
                pieces.setdefault(raw, []).append(i)
        self.vocabulary = Vocabulary(self.eos, pieces)
        self._index = lru_cache(maxsize=256)(self._compile)

    def constraint(self, spec: GrammarSpec) -> OutlinesConstraint:
        from outlines_core import Guide

        try:
            index = self._index(spec)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise InvalidRequest.for_field(spec.field, f"its schema cannot be compiled to a grammar: {exc}") from exc
        return OutlinesConstraint(Guide(index), self.vocab, self.eos, self.stop_ids)

    def _compile(self, spec: GrammarSpec) -> Any:
        from outlines_core import Index
        from outlines_core.json_schema import build_regex_from_schema

        schema = OBJECT_SCHEMA if spec.kind == "json_object" else spec.json_schema
        regex = build_regex_from_schema(schema, WHITESPACE)
        if spec.kind == "tool_call":
            regex = re.escape(CALL_OPEN) + regex + re.escape(CALL_CLOSE)
        return Index(regex, self.vocabulary)

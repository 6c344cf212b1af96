"""The two constrained-decoding backends on the three kinds of tokenizer xgrammar reads: byte-level BPE, raw
(the built-in character-level one) and sentencepiece with byte fallback (built here as Llama 2 and Mistral ship
theirs: `▁` for a space, `<0x0A>` for a byte, Metaspace and ByteFallback decoders). Random walks under the mask
(any allowed token, uniformly) spell only what the grammar allows, and end only with an end of turn."""

from __future__ import annotations

import json
import random
import re
import sys

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ajet.judge import POINTWISE, REASON_CHARS, read_score
from ajet_trainer.embedded.grammar import BACKENDS, grammar_spec, load_grammars
from ajet_trainer.embedded.grammar.outlines_backend import token_bytes
from ajet_trainer.tiny_model import builtin_model_path

TOOLS = [
    {"type": "function", "function": {"name": "flag", "parameters": {
        "type": "object", "properties": {"x": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["x", "n"]}}},
    {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"c": {"enum": ["red", "blue", "ünï"]}}, "required": ["c"]}}},
]  # fmt: skip
CALL = re.compile(r"<tool_call>(.*)</tool_call>", re.S)


def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    """A sentencepiece-style BPE with byte fallback: every byte as `<0xXX>`, a few words with `▁`, and merges."""
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = ["▁", "▁name", "▁arguments", "name", "arguments", '"', "{", "}", ":", ",", "<", ">", "/", "_"]
    words += [c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces + words))}
    merges = [("▁", "name"), ("▁", "arguments")]
    bpe = models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module", params=["bpe", "char", "byte_fallback"])
def tokenizer(request):
    if request.param == "byte_fallback":
        return byte_fallback_tokenizer()
    return AutoTokenizer.from_pretrained(
        str(builtin_model_path("builtin:tiny" + ("-bpe" if request.param == "bpe" else "")))
    )


TEXTS = ['{"name": "pick", "x": [1]}', "cafe\n\t{}", " 12 x", "ünï"]


def test_token_bytes_are_what_the_tokenizer_decodes(tokenizer):
    table = token_bytes(tokenizer)
    encoded = [tokenizer.encode(text, add_special_tokens=False) for text in TEXTS]
    spelled = [(text, ids) for text, ids in zip(TEXTS, encoded) if tokenizer.unk_token_id not in ids]
    assert len(spelled) >= 3  # only the character-level tokenizer lacks a character (ü)
    for text, ids in spelled:
        out = b"".join(table[i] for i in ids).decode()
        assert out.lstrip(" ") == tokenizer.decode(ids).lstrip(" ") == text.lstrip(" ")  # sentencepiece strips one


def _walk(grammars, spec, vocab: int, stop: int, seed: int) -> list[int]:
    rng, constraint, out = random.Random(seed), grammars.constraint(spec), []
    for _ in range(400):
        logits = torch.zeros(vocab)
        constraint.mask_(logits)
        tok = rng.choice(torch.isfinite(logits).nonzero().flatten().tolist())
        constraint.accept(tok)
        out.append(tok)
        if tok == stop:
            return out
    raise AssertionError(f"no end of turn in 400 tokens: {out}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_random_walks_under_the_mask_spell_a_valid_call(tokenizer, backend, seed):
    stop, vocab = tokenizer.eos_token_id, len(tokenizer)
    grammars = load_grammars(tokenizer, vocab, {stop}, (backend,))
    assert grammars.backend == backend
    ids = _walk(grammars, grammar_spec({"tools": TOOLS, "tool_choice": "required"}), vocab, stop, seed)
    text = tokenizer.decode(ids[:-1])  # xgrammar may spell a tag with its special token, where it has one
    match = CALL.fullmatch(text.strip())
    assert match, text
    call = json.loads(match.group(1))
    assert call["name"] in ("flag", "pick") and list(call) == ["name", "arguments"]
    args = call["arguments"]
    assert args in ({"c": "red"}, {"c": "blue"}, {"c": "ünï"}) or (
        isinstance(args["x"], bool) and isinstance(args["n"], int) and set(args) == {"x", "n"}
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_judge_held_to_its_schema_always_gives_a_verdict_the_sdk_reads(tokenizer, backend):
    """Any walk under the judge's schema ends, within 400 tokens, in a verdict `ajet.judge` reads: a reason that
    closes within `REASON_CHARS` and a score from 0 to 10 (an unbounded reason ran into max_tokens; an out-of-range
    score was a `JudgeError`)."""
    stop, vocab = tokenizer.eos_token_id, len(tokenizer)
    grammars = load_grammars(tokenizer, vocab, {stop}, (backend,))
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": POINTWISE}}
    for seed in range(2):
        ids = _walk(grammars, grammar_spec({"response_format": fmt}), vocab, stop, seed)
        verdict = read_score(tokenizer.decode(ids[:-1]))
        assert 0.0 <= verdict.reward <= 1.0 and len(verdict.reason) <= REASON_CHARS


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_object_walks_give_an_object_and_a_token_off_the_mask_is_refused(tokenizer, backend):
    stop, vocab = tokenizer.eos_token_id, len(tokenizer)
    grammars = load_grammars(tokenizer, vocab, {stop}, (backend,))
    spec = grammar_spec({"response_format": {"type": "json_object"}})
    constraint = grammars.constraint(spec)
    logits = torch.zeros(vocab)
    constraint.mask_(logits)
    assert not torch.isfinite(logits[stop])  # nothing written yet: an end of turn is off the mask
    with pytest.raises(RuntimeError, match="grammar"):
        constraint.accept(stop)


def test_no_backend_installed_is_an_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgrammar", None)
    monkeypatch.setitem(sys.modules, "outlines_core", None)
    tok = byte_fallback_tokenizer()
    with pytest.raises(ImportError, match=r"agentjet-swarm-server\[constrained\]"):
        load_grammars(tok, len(tok), {tok.eos_token_id})

"""Constrained decoding through xgrammar, the grammar engine vLLM uses (one grammar semantics for both engines).

It reads Hugging Face tokenizers of every kind (byte-level BPE, sentencepiece, the built-in character-level one)
and its mask costs microseconds a token (`bench/constrained_decoding.py`). It is installed without triton, which
only its CUDA kernel uses: the mask is applied here in torch, on any device. JSON is laid out as `json.dumps`
lays it out (`, ` and `: `, no other whitespace): an untrained policy would otherwise pad its answer with blanks.
"""

from __future__ import annotations

from typing import Any

import torch

from ajet.errors import InvalidRequest
from ajet_trainer.embedded.grammar.spec import CALL_CLOSE, CALL_OPEN, GrammarSpec

EXTRA = "xgrammar==0.2.8"
"""What `pip install` needs for this backend (`make setup` installs it without triton)."""


class XgrammarConstraint:
    """One request's xgrammar matcher and the bitmask it fills."""

    def __init__(self, matcher: Any, vocab: int):
        import xgrammar as xgr

        self.matcher = matcher
        self.bitmask = xgr.allocate_token_bitmask(1, vocab)
        self._bits = torch.arange(32, dtype=torch.int32)

    def mask_(self, logits: torch.Tensor) -> None:
        self.matcher.fill_next_token_bitmask(self.bitmask)
        allowed = ((self.bitmask[0, :, None] >> self._bits) & 1).flatten()[: logits.shape[-1]].bool()
        logits.masked_fill_(~allowed.to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        if not self.matcher.accept_token(token):
            raise RuntimeError(f"the grammar refused token {token}, which was sampled under its mask")


class XgrammarGrammars:
    """xgrammar's compiler for one tokenizer (the compiler caches what it compiled)."""

    backend = "xgrammar"

    def __init__(self, tokenizer: Any, vocab: int, stop_ids: set[int]):
        import xgrammar as xgr  # ImportError: `grammar.load_grammars` tries the next backend

        self.vocab = vocab
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=sorted(stop_ids))
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)

    def constraint(self, spec: GrammarSpec) -> XgrammarConstraint:
        import xgrammar as xgr

        try:
            compiled = self._compile(spec)
        except (RuntimeError, ValueError) as exc:
            raise InvalidRequest.for_field(spec.field, f"its schema cannot be compiled to a grammar: {exc}") from exc
        return XgrammarConstraint(xgr.GrammarMatcher(compiled), self.vocab)

    def _compile(self, spec: GrammarSpec) -> Any:
        import xgrammar as xgr

        body = xgr.Grammar.from_json_schema(spec.json_schema, any_whitespace=False)
        if spec.kind in ("json_object", "json_schema"):
            return self.compiler.compile_grammar(body)
        call = xgr.Grammar.concat(
            xgr.Grammar.from_ebnf(f'root ::= "{CALL_OPEN}"'), body, xgr.Grammar.from_ebnf(f'root ::= "{CALL_CLOSE}"')
        )
        return self.compiler.compile_grammar(call)

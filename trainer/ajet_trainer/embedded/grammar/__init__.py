"""Constrained decoding on the embedded engine: forced tool calls and structured output.

What a request asks for becomes a `GrammarSpec` (`spec.py`, pure). A backend (`interfaces.Grammars`) compiles it
once per tokenizer and hands each request a `TokenConstraint`: at each step it masks the tokens the grammar cannot
take next and is told the one sampled; at the grammar's end only an end-of-turn token is allowed. Two backends:
xgrammar (`xgrammar_backend`, vLLM's, preferred where installed: `make setup`, or `[grammar]` on a GPU box) and
outlines-core (`outlines_backend`, the `[constrained]` extra in `[all]`: no triton). `load_grammars` takes the
first installed one.

The logged log-probability of a constrained token is that of the distribution it was sampled from: the model's
(temperature-free) renormalised over the allowed tokens, as vLLM logs it (it applies the grammar's mask before
its sampler). The trainer's is the unmasked model's, so the engine-trainer gap of such a token is
log(allowed mass) <= 0; with `tis_cap` the truncated importance weight min(pi_trainer / pi_engine, cap) = allowed
mass corrects for it (on an untrained model that weight is ~1/vocabulary: docs/frameworks.md).
"""

from __future__ import annotations

from typing import Any, Callable

from ajet_trainer.embedded.grammar import outlines_backend, xgrammar_backend
from ajet_trainer.embedded.grammar.interfaces import Grammars, TokenConstraint
from ajet_trainer.embedded.grammar.spec import GrammarSpec, grammar_spec

BACKENDS: dict[str, Callable[[Any, int, set[int]], Grammars]] = {
    "xgrammar": xgrammar_backend.XgrammarGrammars,
    "outlines-core": outlines_backend.OutlinesGrammars,
}
"""The backends by name, in the order `load_grammars` tries them."""

EXTRAS = {"xgrammar": xgrammar_backend.EXTRA, "outlines-core": outlines_backend.EXTRA}
"""What `pip install` needs for each."""


def load_grammars(
    tokenizer: Any, vocab: int, stop_ids: set[int], backends: tuple[str, ...] = tuple(BACKENDS)
) -> Grammars:
    """The first of `backends` that is installed, for this tokenizer; ImportError naming what to install."""
    for name in backends:
        try:
            return BACKENDS[name](tokenizer, vocab, stop_ids)
        except ImportError:
            continue
    wanted = " or ".join(EXTRAS[name] for name in backends)
    raise ImportError(f"constrained decoding needs {wanted}: pip install 'agentjet-swarm-server[constrained]'")


__all__ = ["BACKENDS", "Grammars", "GrammarSpec", "TokenConstraint", "grammar_spec", "load_grammars"]

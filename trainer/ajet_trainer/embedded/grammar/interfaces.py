"""The two roles a constrained-decoding backend plays; `xgrammar_backend` and `outlines_backend` implement both."""

from __future__ import annotations

from typing import Protocol

import torch

from ajet_trainer.embedded.grammar.spec import GrammarSpec


class TokenConstraint(Protocol):
    """One request's grammar state: `mask_` before a token is sampled, `accept` after."""

    def mask_(self, logits: torch.Tensor) -> None:
        """Set the logit of every token the grammar cannot take next to -inf, in place (one row, any device).
        Where the grammar may end, the engine's end-of-turn tokens stay allowed; past its end, only they are."""

    def accept(self, token: int) -> None:
        """Advance past the sampled token (RuntimeError if the grammar refuses it: sampling ignored the mask)."""


class Grammars(Protocol):
    """Compiles request grammars for one tokenizer and model; each backend caches what it compiled."""

    backend: str
    """The library behind it (`xgrammar` or `outlines-core`), as `pip install` names it."""

    def constraint(self, spec: GrammarSpec) -> TokenConstraint:
        """A fresh constraint for a request of `spec`; `InvalidRequest` naming `spec.field` when its schema
        cannot be compiled."""

"""How the engine calls a transformers model, whatever its release: the KV cache's keyword and where the output
holds it, and logits of the last position only where the model can."""

from __future__ import annotations

import inspect
from typing import Any

from ajet_trainer.types import PolicyModel


def cache_keyword(model: PolicyModel) -> str:
    """`cache` (transformers >= 5.2x) or `past_key_values` (older releases)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def last_logits_keyword(model: PolicyModel) -> dict[str, int]:
    """`logits_to_keep=1` where the model takes it: a prefill computes the vocabulary's logits of the last position
    only (of a 64-row, 300-token prefill on a 49k vocabulary, 3.8 GB of float32 logits otherwise)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(base.forward).parameters else {}


def cache_of(out: Any) -> Any:
    """The KV cache a forward returned (`cache` or `past_key_values`, by release)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values

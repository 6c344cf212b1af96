"""Several LoRA adapters on one base model in the embedded engine: rows of different adapters decode in one batch.

peft's mixed-adapter batches (`adapter_names=`, one name per row) run each row through its own adapter in the same
forward; with the engine's KV cache each row is as its adapter alone (tests/trainer/test_engine_adapters.py).
peft refuses them while the model is in training mode.
"""

from __future__ import annotations

from typing import Optional

from ajet.errors import ModelNotFound
from ajet_trainer.types import PolicyModel

ADAPTER_MARK = "@"
"""`<served name>@<adapter>` names an adapter the engine holds (vLLM's `policy@<step>` names read the same way)."""


def adapter_names(model: PolicyModel, wanted: list[Optional[str]]) -> dict[str, list[str]]:
    """The forward's `{"adapter_names": [...]}` for a batch whose rows (`wanted`, one per row) name adapters (a row
    that names none: the model's active adapter), else {}; `ValueError` for a name the model does not hold."""
    if not any(wanted):
        return {}
    held = set(getattr(model, "peft_config", {}))
    active = getattr(model, "active_adapter", None)
    names = [w or active for w in wanted]
    unknown = sorted({n for n in names if n not in held})
    if unknown:
        raise ValueError(f"no LoRA adapter named {', '.join(map(str, unknown))} (held: {', '.join(sorted(held))})")
    return {"adapter_names": [str(n) for n in names]}


def held_adapters(model: PolicyModel) -> list[str]:
    """The LoRA adapters `model` holds, by name (none for a model without peft)."""
    return sorted(getattr(model, "peft_config", {}) or {})


def served_names(model: PolicyModel, served: str) -> list[str]:
    """`/v1/models`: the served name (the model as it is), then `<served>@<adapter>` for each adapter held."""
    return [served, *(f"{served}{ADAPTER_MARK}{name}" for name in held_adapters(model))]


def requested_adapter(model: PolicyModel, served: str, asked: Optional[str]) -> Optional[str]:
    """The adapter a request's `model` names (`<served>@<adapter>`), or None for any other name (the model as it
    is: clients name it freely); `ModelNotFound` (404, vLLM's answer) for an adapter the model does not hold."""
    prefix = served + ADAPTER_MARK
    if not asked or not asked.startswith(prefix):
        return None
    name = asked[len(prefix) :]
    if name not in held_adapters(model):
        raise ModelNotFound(f"the model `{asked}` does not exist (served: {', '.join(served_names(model, served))})")
    return name

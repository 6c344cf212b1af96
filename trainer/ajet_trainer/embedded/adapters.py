"""Several LoRA adapters on one base model in the embedded engine: rows of different adapters decode in one batch.

peft's mixed-adapter batches (`adapter_names=`, one name per row) run each row through its own adapter in the same
forward; with the engine's KV cache each row is as its adapter alone (tests/trainer/embedded/test_adapters.py). A
batch whose rows are all of one adapter runs peft's plain path instead, faster (`BatchAdapters`). peft refuses mixed
batches while the model is in training mode (the trainer keeps it in eval mode: dropout off).

Training one adapter of several (`Learner(adapter=...)`): its own parameters and optimizer, the model's active
adapter switched to it for the update (peft's `set_adapter` is global to the model object, so the update holds
the model as every update holds the weights: the engine's batches wait), then switched back.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Optional

from ajet.errors import ModelNotFound
from ajet.protocol import JUDGE_MODEL
from ajet_trainer.types import PolicyModel

if TYPE_CHECKING:  # light to import: the trainer's registry of shared bases names adapters before torch loads
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

ADAPTER_MARK = "@"
"""`<served name>@<adapter>` names an adapter the engine holds (vLLM's `policy@<step>` names read the same way)."""
JUDGE = JUDGE_MODEL
"""The served name of the base model without any adapter, where the engine's model holds LoRA adapters: the frozen
base, served as a judge that costs no memory (`ajet.judge`, the proxy's judge route)."""
BASE_ROWS = "__base__"
"""peft's name, in a mixed batch, for rows that go through no adapter (what a request for `JUDGE` runs as)."""


@dataclass
class BatchAdapters:
    """How one batch's rows reach their adapters at each forward. Rows of several adapters go through peft's
    mixed-adapter path (`kwargs`: per layer, each adapter's rows gathered and its output added back). Rows all of one
    adapter run peft's plain path as the active adapter does: the active one needs nothing; another is made active
    in its LoRA layers for each forward alone (`forward`), so the model is as it was between forwards (an update may
    come between two tokens) and no parameter's `requires_grad` moves (peft's `set_adapter` would make it trainable).
    """

    kwargs: dict[str, list[str]] = field(default_factory=dict)
    """The forward's `{"adapter_names": [...]}` for a mixed batch, else {}."""
    alone: Optional[str] = None
    """The adapter of every row, when it is not the active one."""
    layers: list["BaseTunerLayer"] = field(default_factory=list)
    """The LoRA layers switched to `alone` for each forward."""

    @contextmanager
    def forward(self) -> Iterator[None]:
        if self.alone is None:
            yield
            return
        before = [layer._active_adapter for layer in self.layers]  # peft's per-layer active adapter(s)
        for layer in self.layers:
            layer._active_adapter = [self.alone]
        try:
            yield
        finally:
            for layer, was in zip(self.layers, before):
                layer._active_adapter = was


def batch_adapters(model: PolicyModel, wanted: list[Optional[str]]) -> BatchAdapters:
    """How a batch whose rows name adapters (`wanted`, one per row; a row that names none: the model's active
    adapter) reaches them; `ValueError` for a name the model does not hold."""
    if not any(wanted):
        return BatchAdapters()
    active = getattr(model, "active_adapter", None)
    names = [str(w or active) for w in wanted]
    _require_held(model, [n for n in names if n != BASE_ROWS])
    if len(set(names)) > 1 or BASE_ROWS in names:  # peft's mixed path is the one that runs rows through no adapter
        return BatchAdapters(kwargs={"adapter_names": names})
    if names[0] == active:
        return BatchAdapters()
    from peft.tuners.tuners_utils import BaseTunerLayer  # loaded with the model; this module stays light

    return BatchAdapters(alone=names[0], layers=[m for m in model.modules() if isinstance(m, BaseTunerLayer)])


def held_adapters(model: PolicyModel) -> list[str]:
    """The LoRA adapters `model` holds, by name (none for a model without peft)."""
    return sorted(getattr(model, "peft_config", {}) or {})


def _require_held(model: PolicyModel, names: list[str]) -> None:
    """`ValueError` naming those of `names` the model does not hold."""
    held = held_adapters(model)
    unknown = sorted(set(names) - set(held))
    if unknown:
        raise ValueError(f"no LoRA adapter named {', '.join(unknown)} (held: {', '.join(held)})")


def served_names(model: PolicyModel, served: str) -> list[str]:
    """`/v1/models`: the served name (the model as it is), then `<served>@<adapter>` for each adapter held, and
    `JUDGE` (the base without them) where there are some."""
    adapters = [f"{served}{ADAPTER_MARK}{name}" for name in held_adapters(model)]
    return [served, *adapters, *([JUDGE] if adapters else [])]


def requested_adapter(model: PolicyModel, served: str, asked: Optional[str]) -> Optional[str]:
    """The adapter a request's `model` names (`<served>@<adapter>`; `JUDGE`: none, the base as it was loaded), or
    None for any other name (the model as it is: clients name it freely); `ModelNotFound` (404, vLLM's answer) for an
    adapter the model does not hold, and for `JUDGE` where it holds none (its weights are the policy's own)."""
    if asked == JUDGE:
        if not held_adapters(model):
            raise ModelNotFound(f"the model `{JUDGE}` needs a LoRA job: with full fine-tuning no frozen base is served")
        return BASE_ROWS
    prefix = served + ADAPTER_MARK
    if not asked or not asked.startswith(prefix):
        return None
    name = asked[len(prefix) :]
    if name not in held_adapters(model):
        raise ModelNotFound(f"the model `{asked}` does not exist (served: {', '.join(served_names(model, served))})")
    return name


def adapter_parameters(model: PolicyModel, adapter: str) -> list[torch.nn.Parameter]:
    """The LoRA parameters of one adapter (`...lora_A.<adapter>.weight`, ...); `ValueError` for one not held."""
    _require_held(model, [adapter])
    return [p for n, p in model.named_parameters() if "lora_" in n and f".{adapter}." in n]


@contextmanager
def training(model: PolicyModel, adapter: Optional[str]) -> Iterator[None]:
    """`adapter` active (and alone trainable) for the block, the adapter active before restored after; a no-op for
    None (the model trains as it is)."""
    if adapter is None:
        yield
        return
    before = getattr(model, "active_adapter", None)
    model.set_adapter(adapter)
    try:
        yield
    finally:
        if before is not None and before != adapter:
            model.set_adapter(before)

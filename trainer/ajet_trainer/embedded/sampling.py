"""Drawing the next token of each row of a batch from its logits: temperature, top-p, a row's own seed."""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

import torch


class Sampled(Protocol):
    """What sampling reads of a request (`generation.GenRequest`)."""

    temperature: float
    """0 or less: the most likely token."""
    top_p: float
    """Nucleus sampling's mass: the smallest set of tokens whose probabilities reach it."""


def _filtered_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = torch.sort(probs, descending=True, dim=-1)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        keep[..., 0] = True
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
    return probs


def _sample_row(logits: torch.Tensor, req: Sampled, gen: Optional[torch.Generator]) -> int:
    if req.temperature <= 0:
        return int(torch.argmax(logits))
    probs = _filtered_probs(logits.cpu() if gen is not None else logits, req.temperature, req.top_p)
    return int(torch.multinomial(probs, 1, generator=gen))


def sample_tokens(
    logits: torch.Tensor,
    requests: Sequence[Sampled],
    gens: list[Optional[torch.Generator]],
    live: list[int],
    errors: dict[int, str],
) -> torch.Tensor:
    """One token for each live row. Rows without a seed and with the same settings are sampled together;
    seeded rows draw from their own generator (on the CPU), so their result never depends on the batch.
    A row whose sampling fails gets its reason in `errors` (and a dummy token); the other rows go on."""
    out = torch.zeros(len(live), dtype=torch.long)
    groups: dict[tuple[float, float], list[int]] = {}
    for k, i in enumerate(live):
        req = requests[i]
        if req.temperature > 0 and gens[i] is None:
            groups.setdefault((req.temperature, req.top_p), []).append(k)
            continue
        try:
            out[k] = _sample_row(logits[i], req, gens[i])
        except RuntimeError as exc:
            errors[i] = f"sampling failed: {exc}"
    for (temperature, top_p), ks in groups.items():
        rows = torch.tensor([live[k] for k in ks], device=logits.device)
        try:
            probs = _filtered_probs(logits[rows], temperature, top_p)
            out[torch.tensor(ks)] = torch.multinomial(probs, 1).squeeze(-1).cpu()
        except RuntimeError:  # one bad row spoils the group's draw: draw row by row, keep the failures apart
            for k in ks:
                try:
                    out[k] = _sample_row(logits[live[k]], requests[live[k]], None)
                except RuntimeError as exc:
                    errors[live[k]] = f"sampling failed: {exc}"
    return out

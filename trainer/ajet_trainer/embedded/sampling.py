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
    probs = torch.softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, idx = torch.sort(probs, descending=True, dim=-1)
        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
        keep[..., 0] = True
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p * keep)
    return probs


def _sample_row(logits: torch.Tensor, req: Sampled, gen: Optional[torch.Generator]) -> int:
    """One row's token (`gen`: its own generator, the logits on the CPU)."""
    probs = _filtered_probs(logits, req.temperature, req.top_p)
    return int(torch.multinomial(probs, 1, generator=gen))


def sample_tokens(
    logits: torch.Tensor,
    requests: Sequence[Sampled],
    gens: list[Optional[torch.Generator]],
    live: list[int],
    errors: dict[int, str],
) -> torch.Tensor:
    """One token for each live row, with one device-to-host copy per kind of row: greedy rows in one argmax, rows
    without a seed and with the same settings drawn together, seeded rows each from its own generator (on the CPU,
    their logits copied in one go), so a seeded row's result never depends on the batch. A row whose sampling
    fails gets its reason in `errors` (and a dummy token); the other rows go on."""
    out = torch.zeros(len(live), dtype=torch.long)
    greedy, seeded, groups = [], [], {}
    for k, i in enumerate(live):
        req = requests[i]
        if req.temperature <= 0:
            greedy.append(k)
        elif gens[i] is not None:
            seeded.append(k)
        else:
            groups.setdefault((req.temperature, req.top_p), []).append(k)
    if not greedy and not seeded and len(groups) == 1:  # the usual batch: one draw, no gathering, one copy
        ((temperature, top_p),) = groups
        try:
            rows = logits if len(live) == len(logits) else logits[torch.tensor(live, device=logits.device)]
            return torch.multinomial(_filtered_probs(rows, temperature, top_p), 1).squeeze(-1).cpu()
        except RuntimeError:
            pass  # a bad row spoils the draw: the groups' path below keeps its failure apart
    if greedy:
        rows = torch.tensor([live[k] for k in greedy], device=logits.device)
        out[torch.tensor(greedy)] = logits[rows].argmax(dim=-1).cpu()
    if seeded:
        _sample_seeded(logits, requests, gens, [live[k] for k in seeded], seeded, out, errors)
    for (temperature, top_p), ks in groups.items():
        _sample_group(logits, requests, [live[k] for k in ks], ks, temperature, top_p, out, errors)
    return out


def _sample_seeded(
    logits: torch.Tensor, requests: Sequence[Sampled], gens: list[Optional[torch.Generator]], rows: list[int],
    ks: list[int], out: torch.Tensor, errors: dict[int, str],
) -> None:  # fmt: skip
    """Seeded rows: their logits to the CPU at once, then each drawn from its own generator."""
    on_cpu = logits[torch.tensor(rows, device=logits.device)].cpu()
    for j, (i, k) in enumerate(zip(rows, ks)):
        try:
            out[k] = _sample_row(on_cpu[j], requests[i], gens[i])
        except RuntimeError as exc:
            errors[i] = f"sampling failed: {exc}"


def _sample_group(
    logits: torch.Tensor, requests: Sequence[Sampled], rows: list[int], ks: list[int], temperature: float,
    top_p: float, out: torch.Tensor, errors: dict[int, str],
) -> None:  # fmt: skip
    """Unseeded rows of the same settings, drawn together; one bad row spoils the group's draw, so then each row
    is drawn alone and the failures are kept apart."""
    try:
        probs = _filtered_probs(logits[torch.tensor(rows, device=logits.device)], temperature, top_p)
        out[torch.tensor(ks)] = torch.multinomial(probs, 1).squeeze(-1).cpu()
    except RuntimeError:
        for i, k in zip(rows, ks):
            try:
                out[k] = _sample_row(logits[i], requests[i], None)
            except RuntimeError as exc:
                errors[i] = f"sampling failed: {exc}"

"""The trainer's reference numbers for a logged call, which the served engine's log-probs must equal."""

from __future__ import annotations

import torch


def completion_logprobs(model: torch.nn.Module, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """`model`'s log-probs of `completion_ids` after `prompt_ids` (one forward pass, float32)."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
    n = len(prompt_ids)
    return [float(logp[n - 1 + i, tok]) for i, tok in enumerate(completion_ids)]

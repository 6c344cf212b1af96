"""A real model whose answers are scripted: the tiny model's forward pass, with one chosen token made
near-certain at each step, so a test knows what the engine will generate (e.g. a tool call) and still
goes through real batched sampling, decoding, logprobs and streaming."""

from __future__ import annotations

import torch

BOOST = 60.0
"""Added to the scripted token's logit: its probability is then ~1 at temperature 1."""


class ScriptedModel(torch.nn.Module):
    """The wrapped model, answering `script` (token ids) to one request at a time: the k-th forward pass
    since `reset()` favours `script[k]`."""

    def __init__(self, model: torch.nn.Module, script: list[int]):
        super().__init__()
        self.inner, self.script, self.step = model, list(script), 0
        self.config, self.generation_config = model.config, model.generation_config

    def reset(self, script: list[int]) -> None:
        """Answer `script` from the next request on."""
        self.script, self.step = list(script), 0

    def forward(self, input_ids: torch.Tensor, **kw):  # noqa: ANN003 - the model's own keywords
        out = self.inner(input_ids=input_ids, **kw)
        if self.step < len(self.script):
            out.logits[:, -1, self.script[self.step]] += BOOST
        self.step += 1
        return out

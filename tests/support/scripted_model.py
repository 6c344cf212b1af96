"""A real model whose answers are scripted: the tiny model's forward pass, with one chosen token made
near-certain at each step, so a test knows what the engine will generate (e.g. a tool call) and still
goes through real batched sampling, decoding, logprobs and streaming."""

from __future__ import annotations

import threading

import torch

BOOST = 60.0
"""Added to the scripted token's logit: its probability is then ~1 at temperature 1."""


class ScriptedModel(torch.nn.Module):
    """The wrapped model, answering scripts (token ids) to one request at a time: each request (a forward pass
    over more than one new token: a prefill) takes the next queued script, and its k-th forward pass favours
    the script's k-th token. With no script queued, the model answers as itself."""

    def __init__(self, model: torch.nn.Module, script: list[int]):
        super().__init__()
        self.inner, self.script, self.step = model, list(script), 0
        self.queue: list[list[int]] = []
        self.config, self.generation_config = model.config, model.generation_config

    def reset(self, *scripts: list[int]) -> None:
        """Answer the next requests with `scripts`, one each."""
        self.queue = [list(s) for s in scripts]
        self.script, self.step = [], 0

    def forward(self, input_ids: torch.Tensor, **kw):  # noqa: ANN003 - the model's own keywords
        if input_ids.shape[1] > 1:  # a prefill: a new request
            self.script, self.step = (self.queue.pop(0) if self.queue else []), 0
        out = self.inner(input_ids=input_ids, **kw)
        if self.step < len(self.script):
            out.logits[:, -1, self.script[self.step]] += BOOST
        self.step += 1
        return out


class FileScriptedModel(ScriptedModel):
    """`ScriptedModel` whose queue is a JSON file (a list of token id lists), so that a test process can script
    the policy of a trainer it started (`tests.support.faults.scripted_policy_env`): each prefill takes the file's
    first script and writes the rest back. An empty or missing file: the model answers as itself."""

    def __init__(self, model: torch.nn.Module, path: str):
        super().__init__(model, [])
        self.path = path

    def forward(self, input_ids: torch.Tensor, **kw):  # noqa: ANN003 - the model's own keywords
        if input_ids.shape[1] > 1:
            self.queue = _take(self.path)
        return super().forward(input_ids, **kw)


def _take(path: str) -> list[list[int]]:
    """The file's first script as a one-script queue (the rest written back), or [] when there is none."""
    import json
    import os

    if not os.path.exists(path):
        return []
    with open(path) as f:
        scripts = json.load(f)
    if not scripts:
        return []
    with open(path + ".tmp", "w") as f:
        json.dump(scripts[1:], f)
    os.replace(path + ".tmp", path)
    return [scripts[0]]


class GatedModel(torch.nn.Module):
    """The wrapped model, whose `stop_at`-th forward pass waits until the test opens `gate` (`reached` says it is
    waiting): a test holds a batch between two tokens, does something (a client leaves), then lets it go on."""

    def __init__(self, model: torch.nn.Module, stop_at: int):
        super().__init__()
        self.inner, self.stop_at, self.calls = model, stop_at, 0
        self.reached, self.gate = threading.Event(), threading.Event()
        self.config, self.generation_config = model.config, model.generation_config

    def forward(self, input_ids: torch.Tensor, **kw):  # noqa: ANN003 - the model's own keywords
        self.calls += 1
        if self.calls == self.stop_at:
            self.reached.set()
            assert self.gate.wait(60), "the test never opened the gate"
        return self.inner(input_ids=input_ids, **kw)

"""What the token-history tests check of an episode: one exact trajectory, and its log-probs as the trainer sees
them. Shared by tests/proxy/dataplane/test_token_prompt.py (scripted answers) and tests/e2e/test_token_history_swarm.py
(`ajet-swarm start`, embedded and real vLLM)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ajet_store.types import CallRecord
from ajet_trainer.grpo import collate, sequence_logprobs
from ajet_trainer.samples import episode_sequences
from ajet_trainer.types import TrainSequence
from ajet_trainer.vision import ImageReader

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}
"""The tool the agents of these tests call."""


def add(a: float, b: float) -> str:
    """Add two numbers."""
    return f"{a + b:g}"


def one_trajectory(calls: Sequence[CallRecord], uuid: str) -> TrainSequence:
    """Assert that an episode's calls are one exact trajectory and return its one sequence: labelled `first` then
    `extended`, each prompt the previous prompt + completion + inserted tokens, every completion token trained in
    order and every inserted token masked."""
    assert [c.token_history for c in calls] == ["first"] + ["extended"] * (len(calls) - 1)
    inserted = 0
    for prev, nxt in zip(calls, calls[1:]):
        history = (prev.prompt_ids or []) + (prev.completion_ids or [])
        assert nxt.prompt_ids is not None and nxt.prompt_ids[: len(history)] == history  # what it generated
        inserted += len(nxt.prompt_ids) - len(history)
    seqs, merged, _starts = episode_sequences(calls, uuid, "t")
    assert len(seqs) == 1 and merged == len(calls) - 1
    seq = seqs[0]
    trained = [t for t, m in zip(seq.response_ids, seq.response_mask) if m]
    assert trained == [t for c in calls for t in c.completion_ids or []]
    assert seq.response_mask.count(0) == inserted and (inserted > 0 or len(calls) == 1)
    return seq


def logprob_gaps(
    model: torch.nn.Module, seq: TrainSequence, pad_id: int, images: Optional[ImageReader] = None
) -> list[float]:
    """|trainer - engine| log-prob of each trained token of `seq`, the trainer scoring it in one forward pass (with its
    images read back from the store, for a VL model)."""
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, collate([(seq, 1.0)], pad_id, images))
    return [abs(float(a) - b) for a, b, m in zip(logp[0], seq.rollout_logprobs, seq.response_mask) if m]

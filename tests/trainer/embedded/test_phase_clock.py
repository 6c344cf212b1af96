"""The embedded engine's phase clock (`ajet_trainer.embedded.phase_clock`): a batch's prefill, decode and token
drawing are added up where they happen, with the tokens each ran."""

from __future__ import annotations

from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.joining import copyable_cache
from ajet_trainer.embedded.phase_clock import PhaseClock
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest


def test_a_batch_counts_its_prefill_decode_and_draws(tiny):
    model, tok = tiny
    clock, tokens = PhaseClock(), 5
    prompts = [[5, 17, 42, 8, 9, 3], [9, 3], [5, 17, 42, 8, 9, 3]]  # the first and last alike: a group's prompt
    requests = [GenRequest(p, max_tokens=tokens, min_tokens=tokens, seed=i) for i, p in enumerate(prompts)]
    results = generate_batch(model, tok, requests, eos_token_ids(model, tok), clock=clock)
    assert all(len(r.token_ids) == tokens for r in results)
    t = clock.reading()
    alike_once = copyable_cache(model.config)
    assert t.prefill_tokens == (8 if alike_once else 14)  # padding never counted
    assert (t.decode_steps, t.decode_tokens) == (tokens - 1, 3 * (tokens - 1))  # the last draw runs no forward
    assert t.prefill_s > 0 and t.decode_s > 0 and t.sample_s > 0 and t.constrain_s >= 0
    again = generate_batch(model, tok, requests[:1], eos_token_ids(model, tok), clock=clock)
    assert len(again[0].token_ids) == tokens and clock.reading().decode_steps == 2 * (tokens - 1)  # running totals

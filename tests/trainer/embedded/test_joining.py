"""Continuous batching (`ajet_trainer.embedded.joining`, `Decoding.absorb`, `Batcher._join_waiting`): a request that
arrives while a batch runs joins it at a token boundary, and each row is still what it samples alone. Driven step
by step: no thread timing decides a result."""

from __future__ import annotations

import asyncio

import pytest
import torch

from ajet_trainer.embedded.batcher import Batcher, Pending
from ajet_trainer.embedded.generation import Decoding, generate_batch
from ajet_trainer.embedded.joining import join_masks, pad_left
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest
from tests.trainer.embedded.test_adapters import with_adapters

LONG, SHORT, LONGER = [5, 17, 42, 8, 9, 3], [9, 3], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]


def test_padding_on_the_left_to_the_wider_side():
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    joined = join_masks(mask, torch.tensor([[1, 1, 1, 1, 1]]))
    assert joined.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    keys = torch.ones(2, 3, 4, 5)  # rows, heads, positions, head size
    assert pad_left(keys, 6, -2).shape == (2, 3, 6, 5) and pad_left(keys, 6, -2)[:, :, :2].abs().sum() == 0
    assert pad_left(keys, 3, -2) is keys


def _req(prompt: list[int], seed: int, tokens: int = 10) -> GenRequest:
    return GenRequest(list(prompt), max_tokens=tokens, min_tokens=tokens, seed=seed)


def test_rows_that_join_a_running_batch_sample_as_they_would_alone(tiny):
    """A batch runs 3 tokens; then a shorter and a longer prompt join it (both sides padded): every row's tokens are
    those it samples alone with its seed, and its log-probs agree to float noise."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    first = [_req(LONG, 1), _req(SHORT, 2)]
    late = [_req(SHORT, 3), _req(LONGER, 4)]
    run = Decoding(model, tok, first, eos, 0)
    assert run.joinable()
    for _ in range(3):
        run.step()
    run.absorb(Decoding(model, tok, late, eos, 1))
    while not run.finished():
        run.step()
    results = run.results()
    for req, res in zip(first + late, results):
        alone = generate_batch(model, tok, [_req(req.prompt_ids, req.seed or 0)], eos)[0]
        assert res.token_ids == alone.token_ids and len(res.token_ids) == 10
        assert res.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert [r.version_spans for r in results] == [[(0, 0)], [(0, 0)], [(0, 1)], [(0, 1)]]


def test_rows_of_other_adapters_join_as_their_adapter_alone():
    model, tok = with_adapters("red", "blue")
    eos = eos_token_ids(model, tok)
    red = GenRequest(list(LONG), max_tokens=8, seed=5, adapter="red")
    blue = GenRequest(list(SHORT), max_tokens=8, seed=6, adapter="blue")
    run = Decoding(model, tok, [red], eos, 0)
    run.step()
    run.absorb(Decoding(model, tok, [blue], eos, 0))
    while not run.finished():
        run.step()
    for req, res in zip((red, blue), run.results()):
        alone = GenRequest(req.prompt_ids, max_tokens=8, seed=req.seed, adapter=req.adapter)
        assert res.token_ids == generate_batch(model, tok, [alone], eos)[0].token_ids


def _pending(loop: asyncio.AbstractEventLoop, prompt: list[int], seed: int) -> Pending:
    return Pending(_req(prompt, seed), loop, loop.create_future(), loop.create_future())


def test_the_batcher_takes_in_what_waits_up_to_its_batch_size_and_not_while_an_update_waits(tiny):
    model, tok = tiny
    loop = asyncio.new_event_loop()
    b = Batcher(model, tok, eos_token_ids(model, tok), max_batch=3, window_s=0.003, policy_version=7)
    running = _pending(loop, LONG, 1)
    b.running = [running]
    run = Decoding(model, tok, [running.req], b.eos_ids, 7)
    waiting = [_pending(loop, SHORT, 2 + i) for i in range(3)]
    for p in waiting:
        b.submit(p)
    b._update_wanted.set()  # an update waits for the weights: the batch takes no one in
    b._between(run)
    assert len(run.requests) == 1 and b.joins
    b._update_wanted.clear()
    b._between(run)  # room for two more (max_batch 3); the third waits for the next batch
    assert [p.req for p in b.running] == run.requests == [running.req, waiting[0].req, waiting[1].req]
    assert b.stats["joined"] == 2 and b.stats["max_batch_seen"] == 3 and b._q.qsize() == 1
    loop.run_until_complete(asyncio.sleep(0))  # the started futures are set through the loop
    assert [p.started.result() for p in waiting[:2]] == [7, 7] and not waiting[2].started.done()
    loop.close()


def test_rows_of_one_prompt_are_prefilled_once_and_sample_as_they_would_alone(tiny):
    """A group's episodes share their first prompt: four rows of two prompts prefill two rows, and each row's seeded
    tokens are still those it samples alone."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    seen: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    try:
        reqs = [_req(LONG, 1), _req(SHORT, 2), _req(LONG, 3), _req(SHORT, 4)]
        results = generate_batch(model, tok, reqs, eos)
    finally:
        hook.remove()
    assert seen[0] == (2, len(LONG)) and seen[1][0] == 4  # the prefill ran two rows; the steps run all four
    for req, res in zip(reqs, results):
        alone = generate_batch(model, tok, [_req(req.prompt_ids, req.seed or 0)], eos)[0]
        assert res.token_ids == alone.token_ids
        assert res.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert results[0].token_ids != results[2].token_ids  # one prompt, two seeds: the rows did not share a sample


def test_rows_that_ended_leave_the_batch_when_others_join_and_every_result_stays(tiny):
    """A short answer ends; when a request joins, the ended row leaves the batch's tensors (later steps compute the
    live rows only) and its result is kept: every result comes back in the order the rows came, as each alone."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    first = [_req(LONG, 1, tokens=2), _req(SHORT, 2, tokens=10)]
    late = _req(LONGER, 3, tokens=6)
    run = Decoding(model, tok, first, eos, 0)
    for _ in range(3):
        run.step()
    assert run.rows[0].finish is not None and run.rows[1].finish is None
    run.compact()
    run.absorb(Decoding(model, tok, [late], eos, 0))
    assert len(run.requests) == 2 and run.mask.shape[0] == 2 and run.logits.shape[0] == 2  # the ended row left
    while not run.finished():
        run.step()
    results = run.results()
    assert [len(r.token_ids) for r in results] == [2, 10, 6]
    for req, res in zip([*first, late], results):
        alone = generate_batch(model, tok, [_req(req.prompt_ids, req.seed or 0, req.max_tokens)], eos)[0]
        assert res.token_ids == alone.token_ids
        assert res.logprobs == pytest.approx(alone.logprobs, abs=1e-4)

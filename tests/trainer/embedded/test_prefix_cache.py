"""The embedded engine's prefix cache (`ajet_trainer.embedded.prefix_cache`): an episode's next call starts from the
keys and values of its last one and samples, token for token with a seed, what a fresh prefill samples; across
adapters, rows that join a running batch, and updates. Driven step by step: no thread timing decides a result."""

from __future__ import annotations

import asyncio

import pytest
import torch

from ajet_trainer.embedded.batcher import Batcher, Pending
from ajet_trainer.embedded.generation import Decoding, generate_batch
from ajet_trainer.embedded.prefix_cache import MIN_TOKENS, PrefixCache, common_length
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest
from tests.trainer.embedded.test_adapters import with_adapters

FIRST = [5 + (7 * i) % 90 for i in range(24)]
"""An episode's first prompt (24 ids of builtin:tiny's vocabulary)."""
OTHER = [11 + (5 * i) % 80 for i in range(20)]
"""Another episode's."""
MIB = 1 << 20


def _req(prompt: list[int], seed: int, tokens: int = 8, adapter: str | None = None) -> GenRequest:
    return GenRequest(list(prompt), max_tokens=tokens, min_tokens=tokens, seed=seed, adapter=adapter)


def _layers(n: int, rows: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two layers of keys and values of `n` tokens (2 heads of size 4)."""
    return [(torch.randn(rows, 2, n, 4), torch.randn(rows, 2, n, 4)) for _ in range(2)]


def _fresh(model, tok, eos, req: GenRequest):
    """What `req` samples with its whole prompt prefilled, alone."""
    return generate_batch(model, tok, [_req(req.prompt_ids, req.seed or 0, req.max_tokens, req.adapter)], eos)[0]


def test_the_longest_shared_start_of_the_same_adapter_and_version_is_found():
    cache = PrefixCache(MIB)
    ids = list(range(100, 140))
    cache.keep(ids[:18] + [9, 9, 9], None, 0, _layers(21))
    cache.keep(ids[:30] + [7, 7], None, 0, _layers(32))  # it does not extend the first: both stay
    assert len(cache) == 2
    hit = cache.find(ids, None, 0)
    assert hit is not None and hit.length == 30 and hit.layers()[0][0].shape == (1, 2, 30, 4)
    assert cache.find(ids, "red", 0) is None and cache.find(ids, None, 1) is None  # another adapter, version
    assert cache.find(ids[:25], None, 0).length == 24  # one token short of the prompt: its logits are computed anew
    assert cache.find(list(range(MIN_TOKENS - 1)), None, 0) is None
    assert cache.stats.hits == 2 and cache.stats.misses == 3 and cache.stats.hit_tokens == 54
    assert common_length(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4, 5])) == 2


def test_an_entry_goes_when_a_longer_one_extends_it_and_the_least_recently_used_when_room_runs_out():
    one = sum(k.nbytes + v.nbytes for k, v in _layers(20))
    cache = PrefixCache(3 * one)
    a, b, c = list(range(20)), list(range(100, 120)), list(range(200, 220))
    for ids in (a, b, c):
        cache.keep(ids, None, 0, _layers(20))
    cache.keep(a + [1, 2], None, 0, _layers(22))  # extends a: a goes (then b, the least recently used, for room)
    assert cache.find(a + [1, 2, 3], None, 0).length == 22
    assert cache.find(b + [0], None, 0) is None and cache.find(c + [0], None, 0) is not None
    assert cache.nbytes <= cache.max_bytes and cache.stats.evicted == 1
    cache.keep(list(range(300, 400)), None, 0, _layers(100))  # larger than the whole cache: not kept
    assert cache.find(list(range(300, 401)), None, 0) is None


def test_entries_of_replaced_weights_and_gone_adapters_go():
    cache = PrefixCache(MIB)
    ids = list(range(30))
    cache.keep(ids, None, 3, _layers(30))
    cache.keep(ids, "red", 1, _layers(30))
    cache.keep(ids, "blue", 1, _layers(30))
    versions = {None: 4, "red": 1, "blue": 1}
    cache.retain(lambda adapter: versions[adapter])
    assert cache.find(ids + [1], None, 3) is None and cache.find(ids + [1], "red", 1) is not None
    cache.forget("red")
    assert cache.find(ids + [1], "red", 1) is None and cache.find(ids + [1], "blue", 1) is not None


def test_a_next_call_from_the_cache_samples_what_a_fresh_prefill_samples(tiny):
    """Two episodes' first calls are kept; their next calls (prompt + answer + new tokens) and a new episode's first
    call run in one batch: the first two prefill only their new tokens, and every row's seeded tokens are those of a
    fresh prefill, its log-probs equal to float noise."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    cache = PrefixCache(64 * MIB)
    firsts = generate_batch(model, tok, [_req(FIRST, 1), _req(OTHER, 2)], eos, 0, prefixes=cache)
    assert cache.stats.kept == 2 and cache.stats.hits == 0
    nexts = [
        _req(FIRST + firsts[0].token_ids + [40, 41, 42], 3, tokens=10),
        _req(OTHER + firsts[1].token_ids + [50, 51, 52, 53, 54, 55], 4, tokens=10),
        _req(list(reversed(FIRST)), 5, tokens=10),
    ]
    widths: list[int] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        results = generate_batch(model, tok, nexts, eos, 0, prefixes=cache)
    finally:
        hook.remove()
    # each first call's prompt and 7 of its 8 answer tokens: the last one was never run (its batch ended with it)
    assert cache.stats.hits == 2 and cache.stats.hit_tokens == len(FIRST) + len(OTHER) + 2 * 7
    assert widths[0] == len(FIRST)  # the prefill ran the new prompt whole and the others' new tokens (and one)
    for req, res in zip(nexts, results):
        fresh = _fresh(model, tok, eos, req)
        assert res.token_ids == fresh.token_ids and len(res.token_ids) == 10
        assert res.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)


def test_a_call_that_joins_a_running_batch_starts_from_the_cache_too(tiny):
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    cache = PrefixCache(64 * MIB)
    (first,) = generate_batch(model, tok, [_req(FIRST, 1)], eos, 0, prefixes=cache)
    run = Decoding(model, tok, [_req(OTHER, 2, tokens=12)], eos, 0, cache)
    for _ in range(3):
        run.step()
    late = _req(FIRST + first.token_ids + [9, 9], 3)
    run.absorb(Decoding(model, tok, [late], eos, 0, cache))
    while not run.finished():
        run.step()
    assert cache.stats.hits == 1
    res = run.results()[1]
    fresh = _fresh(model, tok, eos, late)
    assert res.token_ids == fresh.token_ids and res.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)


def test_rows_alike_after_their_found_tokens_are_still_prefilled_once(tiny):
    """A call sent twice (a retry, or a group's rows with one history) shares its prefill, from the cache too."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    cache = PrefixCache(64 * MIB)
    (first,) = generate_batch(model, tok, [_req(FIRST, 1)], eos, 0, prefixes=cache)
    prompt = FIRST + first.token_ids + [9, 9]
    rows: list[int] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        results = generate_batch(model, tok, [_req(prompt, 2), _req(prompt, 3)], eos, 0, prefixes=cache)
    finally:
        hook.remove()
    assert rows[0] == 1 and rows[1] == 2
    for seed, res in zip((2, 3), results):
        assert res.token_ids == _fresh(model, tok, eos, _req(prompt, seed)).token_ids


def test_an_adapter_starts_only_from_its_own_tokens():
    model, tok = with_adapters("red", "blue")
    eos = eos_token_ids(model, tok)
    cache = PrefixCache(64 * MIB)
    (first,) = generate_batch(model, tok, [_req(FIRST, 1, adapter="red")], eos, 0, prefixes=cache)
    prompt = FIRST + first.token_ids + [9, 9]
    mixed = [_req(prompt, 2, adapter="red"), _req(prompt, 2, adapter="blue")]
    results = generate_batch(model, tok, mixed, eos, 0, prefixes=cache)
    assert cache.stats.hits == 1 and cache.stats.misses == 2  # the first call missed too
    for req, res in zip(mixed, results):
        fresh = _fresh(model, tok, eos, req)
        assert res.token_ids == fresh.token_ids and res.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)


def test_an_update_drops_what_the_old_weights_ran(tiny):
    """The batcher's version change drops the cache's entries: the next call is prefilled whole under the new weights
    and samples what a fresh prefill of them samples."""
    model, tok = tiny
    eos = eos_token_ids(model, tok)
    b = Batcher(model, tok, eos, max_batch=4, window_s=0.003, policy_version=0, prefix_cache_bytes=64 * MIB)
    assert b.prefixes is not None
    loop = asyncio.new_event_loop()
    try:
        first = _served(b, loop, _req(FIRST, 1))
        assert len(b.prefixes) == 1
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with b.paused(next_version=1), torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        assert len(b.prefixes) == 0
        again = _req(FIRST + first.token_ids + [9, 9], 2)
        res = _served(b, loop, again)
        assert b.prefixes.stats.hits == 0 and res.policy_version == 1
        assert res.token_ids == _fresh(model, tok, eos, again).token_ids
        model.load_state_dict(saved)
    finally:
        loop.close()


def _served(b: Batcher, loop: asyncio.AbstractEventLoop, req: GenRequest):
    """`req` run as the batcher's worker runs a batch (on this thread), its result read from its future."""
    pending = Pending(req, loop, loop.create_future(), loop.create_future())
    b._run_batch([pending])
    loop.run_until_complete(asyncio.sleep(0))
    return pending.done.result()

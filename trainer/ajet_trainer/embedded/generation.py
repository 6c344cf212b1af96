"""Batched sampling with a KV cache: many requests, one left-padded batch, per-request settings.

Each request keeps its own temperature, top_p, max_tokens, stop strings and seed (a per-request
`torch.Generator`), so batching does not change a request's result beyond float noise, and the same
seed gives the same tokens whether the answer is streamed or not. Position ids follow the attention
mask (`cumsum - 1`), so left padding does not shift positions. Log-probs are the model's own
(temperature-free, like vLLM's default) for the sampled tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Optional, Sequence, Union

import torch

from ajet_trainer.embedded.adapters import batch_adapters
from ajet_trainer.embedded.detok import IncrementalDecoder
from ajet_trainer.embedded.joining import (
    cache_holding,
    copyable_cache,
    distinct_rows,
    join_caches,
    join_masks,
    joinable,
    row_tokens,
    select_rows,
)
from ajet_trainer.embedded.model_calls import cache_keyword, cache_of, last_logits_keyword
from ajet_trainer.embedded.phase_clock import PhaseClock
from ajet_trainer.embedded.prefix_cache import Hit, PrefixCache, stacked
from ajet_trainer.embedded.row_rules import (
    accepted,
    advance,
    constrain,
    hold_the_end,
    row_result,
    seeded_generator,
    top_alternatives,
)
from ajet_trainer.embedded.sampling import sample_tokens
from ajet_trainer.embedded.types import ABORT, GenRequest, GenResult, TokenOut
from ajet_trainer.types import PolicyModel, Tokenizer
from ajet_trainer.vision import joined, last_positions, multimodal_positions


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


Versions = Union[int, Sequence[int]]
"""The policy version a batch samples under: one for every row, or one per row."""


def per_row(version: Versions, n: int) -> list[int]:
    """`version` as one version per row of `n`."""
    if isinstance(version, int):
        return [version] * n
    if len(version) != n:
        raise ValueError(f"{len(version)} versions for {n} rows")
    return list(version)


@torch.no_grad()
def generate_batch(
    model: PolicyModel,
    tokenizer: Tokenizer,
    requests: list[GenRequest],
    eos_ids: set[int],
    version: Versions = 0,
    between: Optional[Callable[["Decoding"], None]] = None,
    prefixes: Optional[PrefixCache] = None,
    clock: Optional[PhaseClock] = None,
) -> list[GenResult]:
    """Sample every request in one batch under policy `version` (one for all rows, or one per row: rows of several
    experiments' adapters); returns results in request order. `between` is called with the batch before each token
    (the batcher yields it to an update there, with partial rollouts). With `prefixes`, rows start from the kept
    tokens their prompts begin with, and keep theirs when they end; `clock` adds up where the time goes."""
    run = Decoding(model, tokenizer, requests, eos_ids, version, prefixes, clock)
    while not run.finished():
        if between is not None:
            between(run)
        run.step()
    run.keep_ended()
    return run.results()


@dataclass
class Row:
    """One request's state in a batch being sampled; its row of the batch's tensors is its index in
    `Decoding.rows`."""

    request: GenRequest
    place: int
    """Its place among the batch's requests, first ones and those that joined: the order of `results`."""
    gen: Optional[torch.Generator]
    """Its own generator when it has a seed (its tokens then do not depend on the batch)."""
    text: IncrementalDecoder
    """Its answer's text so far."""
    spans: list[tuple[int, int]]
    """Its runs of tokens by the policy version that sampled them: (the run's first token, the version)."""
    ids: list[int] = field(default_factory=list)
    """The tokens sampled so far."""
    fed: int = 0
    """How many of them the model has run (their keys and values are in the batch's cache)."""
    kept: bool = False
    """Whether its tokens' keys and values went to the prefix cache (or must not: the weights changed since)."""
    lps: list[float] = field(default_factory=list)
    """Their log-probabilities."""
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    """Each token's most likely alternatives, when asked."""
    finish: Optional[str] = None
    """Why it ended (`stop`, `length`, `error`, `abort`); None while it is live."""
    error: Optional[str] = None
    """Its own failure, which ended it (never its batch)."""

    def result(self) -> GenResult:
        """Its outcome as it stands."""
        return replace(row_result(self.ids, self.lps, self.tops, self.finish or "length", self.text.text, self.request,
                               self.error), version_spans=self.spans)  # fmt: skip


class Decoding:
    """One batch being sampled with a KV cache: prefilled when made, then one token for every live row per `step`.
    A row ends on EOS, a stop string, its `max_tokens`, or its own failure (`errors`), which never ends the batch."""

    @torch.no_grad()
    def __init__(
        self,
        model: PolicyModel,
        tokenizer: Tokenizer,
        requests: list[GenRequest],
        eos_ids: set[int],
        version: Versions = 0,
        prefixes: Optional[PrefixCache] = None,
        clock: Optional[PhaseClock] = None,
    ):
        self.model, self.tokenizer, self.eos_ids = model, tokenizer, eos_ids
        self.clock = clock or PhaseClock()
        """Where the batch's time goes (the batcher's, across its batches; else the batch's own)."""
        ends = eos_ids | {tokenizer.pad_token_id}
        self.rows = [
            Row(r, i, seeded_generator(r.seed), IncrementalDecoder(tokenizer, ends), [(0, v)])
            for i, (r, v) in enumerate(zip(requests, per_row(version, len(requests))))
        ]
        """The batch's rows, in the order of its tensors' rows."""
        self.device = next(model.parameters()).device
        self.done: dict[int, GenResult] = {}
        """The results of rows that ended and left the batch's tensors (`compact`), by their place."""
        self.cache_kw, self.last_only = cache_keyword(model), last_logits_keyword(model)
        self.shares_prompts = copyable_cache(model.config)
        """Whether alike rows are prefilled once (`joining.distinct_rows`): the model's cache can be copied by row."""
        self.adapters = batch_adapters(model, [r.adapter for r in requests])
        """How each forward reaches the rows' adapters."""
        self.prefixes = prefixes if self.shares_prompts else None
        """Where rows find the kept tokens their prompts begin with, and keep theirs (`prefix_cache`); None: every
        prompt is prefilled whole."""
        hits = self._found()
        if any(hit is not None for hit in hits):
            self._prefill_after(hits)
        else:
            ids, self.mask = _left_pad([r.prompt_ids for r in requests], tokenizer.pad_token_id)
            ids, self.mask = ids.to(self.device), self.mask.to(self.device)
            self._prefill(ids, (self.mask.cumsum(-1) - 1).clamp(min=0))

    @property
    def requests(self) -> list[GenRequest]:
        """The rows' requests, in the order of the batch's tensors' rows."""
        return [row.request for row in self.rows]

    def _found(self) -> list[Optional[Hit]]:
        """Each row's kept leading tokens, if any. None for all in a batch with images: a VL model's positions of an
        image's tokens are its own, not a count of the tokens before."""
        if self.prefixes is None or any(r.request.images is not None for r in self.rows):
            return [None] * len(self.rows)
        return [self.prefixes.find(r.request.prompt_ids, r.request.adapter, r.spans[-1][1]) for r in self.rows]

    def _prefill_after(self, hits: list[Optional[Hit]]) -> None:
        """Prefill each row's tokens after those found for it (a row without: its whole prompt), on a cache that holds
        the found ones: [padding, found tokens, padding, the rest] a row, every padding masked."""
        layers, found = stacked(hits)
        rest = [r.prompt_ids[hit.length if hit is not None else 0 :] for r, hit in zip(self.requests, hits)]
        ids, fresh = _left_pad(rest, self.tokenizer.pad_token_id)
        self.mask = torch.cat([found, fresh], 1).to(self.device)
        pos = (self.mask.cumsum(-1) - 1).clamp(min=0)[:, found.shape[1] :]
        past = cache_holding(self.model.config, [(k.to(self.device), v.to(self.device)) for k, v in layers])
        self._prefill(ids.to(self.device), pos, past, [(id(h.prefix), h.length) if h else () for h in hits])

    def _prefill(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        past: Optional[object] = None,
        origins: Optional[list[Hashable]] = None,
    ) -> None:
        """Run the rows' tokens (after those `past` holds, at `origins`), keeping the cache and each row's next-token
        logits; alike rows (the same tokens, origin, adapter and images: a group's one prompt) run once, where the
        cache can be copied to each. Rows with images (a VL model's) run with their pixel values, at the model's
        multimodal positions."""
        requests = self.requests
        wanted = [r.adapter for r in requests]
        origins = origins or [()] * len(requests)
        kinds = [(r.adapter, r.images.sha256 if r.images is not None else (), o) for r, o in zip(requests, origins)]
        alike = distinct_rows(ids, kinds) if self.shares_prompts else None
        reps = alike[0] if alike is not None else list(range(len(ids)))
        if past is not None and alike is not None:
            select_rows(past, torch.tensor(reps))
        held = {self.cache_kw: past} if past is not None else {}
        adapters = batch_adapters(self.model, [wanted[i] for i in reps]) if alike is not None else self.adapters
        images = joined([requests[i].images for i in reps])
        positions, seen = pos[reps], {}
        if images is not None:
            positions = multimodal_positions(self.model, ids[reps], self.mask[reps], images.grid_thw)
            seen = {"pixel_values": images.pixel_values.to(self.device), "image_grid_thw": images.grid_thw}
        ran = int(self.mask[reps][:, -ids.shape[1] :].sum())  # the rows' new tokens, padding left out
        with self.clock.timed("prefill_s", prefill_tokens=ran), adapters.forward():
            out = self.model(
                input_ids=ids[reps], attention_mask=self.mask[reps], position_ids=positions, use_cache=True,
                **held, **self.last_only, **adapters.kwargs, **seen,
            )  # fmt: skip
        self.past, self.last_pos = cache_of(out), last_positions(positions)
        self.logits = out.logits[:, -1, :].float()
        if alike is not None:
            select_rows(self.past, alike[1])
            self.logits, self.last_pos = self.logits[alike[1]], self.last_pos[alike[1]]

    @torch.no_grad()
    def reprefill(self, version: Versions) -> int:
        """Go on under new weights (`version`, for all rows or per row): each live row's prompt + answer so far is
        run again, the next token drawn from the new policy; sampling state, grammar and stream are the row's own
        and go on. Returns the tokens re-prefilled."""
        pad = self.tokenizer.pad_token_id
        live = [row for row in self.rows if row.finish is None]
        for row in self.rows:
            row.kept = row.kept or row.finish is not None  # an ended row's keys and values are the old weights'
            row.fed = len(row.ids)
        seqs = [row.request.prompt_ids + row.ids if row.finish is None else [pad] for row in self.rows]
        ids, self.mask = _left_pad(seqs, pad)
        ids, self.mask = ids.to(self.device), self.mask.to(self.device)
        self._prefill(ids, (self.mask.cumsum(-1) - 1).clamp(min=0))
        for row, now in zip(self.rows, per_row(version, len(self.rows))):
            if row.finish is None and row.spans[-1][1] != now:
                row.spans.append((len(row.ids), now))
        return sum(len(row.request.prompt_ids) + len(row.ids) for row in live)

    def joinable(self) -> bool:
        """Whether rows can join this batch (`absorb`): its KV cache is of a kind `joining` can extend."""
        return joinable(self.past)

    def absorb(self, more: "Decoding") -> None:
        """Take the rows of `more` (prefilled apart, by the same model, none sampled yet) into this batch, after its
        own: from the next `step` they are sampled with it, each as it would be alone (both `joinable`)."""
        placed = len(self.rows) + len(self.done)
        for k, row in enumerate(more.rows):
            row.place = placed + k
        self.mask = join_masks(self.mask, more.mask)
        join_caches(self.past, more.past)
        self.last_pos = torch.cat([self.last_pos, more.last_pos])
        self.logits = torch.cat([self.logits, more.logits])
        self.rows += more.rows
        self.adapters = batch_adapters(self.model, [r.adapter for r in self.requests])

    def compact(self) -> None:
        """Drop the rows that ended from the batch's tensors, their results kept (`done`): later steps compute the
        live rows only (a batch that rows keep joining would otherwise carry every ended row to its end). Only on a
        `joinable` cache, between two steps."""
        keep = [i for i, row in enumerate(self.rows) if row.finish is None]
        if not keep or len(keep) == len(self.rows):
            return
        self.keep_ended()
        self.done.update({row.place: row.result() for row in self.rows if row.finish is not None})
        rows = torch.tensor(keep, device=self.device)
        select_rows(self.past, rows)
        self.mask, self.last_pos, self.logits = self.mask[rows], self.last_pos[rows], self.logits[rows]
        self.rows = [self.rows[i] for i in keep]
        self.adapters = batch_adapters(self.model, [r.adapter for r in self.requests])

    def keep_ended(self) -> None:
        """Keep the tokens the model ran of each row that ended with an answer (`stop`, `length`) in the prefix cache,
        once: its prompt and the answer tokens fed back (its next call's prompt begins with them)."""
        if self.prefixes is None:
            return
        for i, row in enumerate(self.rows):
            if row.kept or row.finish not in ("stop", "length") or row.request.images is not None:
                continue
            row.kept = True
            n = len(row.request.prompt_ids) + row.fed
            positions = self.mask[i].nonzero().flatten()[:n]  # its tokens first, then any run after its end
            ids = row.request.prompt_ids + row.ids[: row.fed]
            self.prefixes.keep(ids, row.request.adapter, row.spans[-1][1], row_tokens(self.past, i, positions))

    def finished(self) -> bool:
        """Whether every row has ended."""
        return all(row.finish is not None for row in self.rows)

    @torch.no_grad()
    def step(self) -> None:
        """Sample one token for each live row and hand it on; then, unless every row ended, run the model on them."""
        sampling = [row for row in self.rows if row.finish is None]
        next_tok = self._sample_live()
        if self.finished():
            return
        for row in sampling:  # their tokens (the one that ended a row too) are run now
            row.fed = len(row.ids)
        # A finished row's later tokens are never read (attention stays within a row), so they are left unmasked:
        # a batch without padding keeps a mask of all ones, which transformers drops, and SDPA then reads the
        # grouped KV heads as they are; a mask makes it copy them to every query head, each layer, each token
        # (128 answers of up to 64 tokens on builtin:small: 2.07 s -> 1.28 s, as fast as `generate`;
        # bench/engine_generate.py).
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        self.last_pos = self.last_pos + 1
        with self.clock.timed("decode_s", decode_steps=1, decode_tokens=len(self.rows)), self.adapters.forward():
            out = self.model(
                input_ids=next_tok[:, None].to(self.device),
                attention_mask=self.mask,
                position_ids=self.last_pos[:, None],
                use_cache=True,
                **{self.cache_kw: self.past},
                **self.adapters.kwargs,
            )
        self.past, self.logits = cache_of(out), out.logits[:, -1, :].float()

    def _sample_live(self) -> torch.Tensor:
        """One token for every live row (the pad for ended ones), each handed to its request; a row whose client
        left ends here, before its next token (`abort`)."""
        t0, constrained = time.perf_counter(), self.clock.totals["constrain_s"]
        try:
            return self._draw()
        finally:  # the constraints' share is counted apart (`_draw` adds it)
            self.clock.add("sample_s", time.perf_counter() - t0 - (self.clock.totals["constrain_s"] - constrained))

    def _draw(self) -> torch.Tensor:
        rows, logits, pad = self.rows, self.logits, self.tokenizer.pad_token_id
        for row in rows:
            if row.finish is None and row.request.cancelled.is_set():
                row.finish = ABORT
        live = [i for i, row in enumerate(rows) if row.finish is None]
        if not live:  # every row's client left
            return torch.full((len(rows),), pad, dtype=torch.long)
        requests, errors = self.requests, {}  # errors: each failing row's, by its index, this step
        with self.clock.timed("constrain_s"):
            constrain(logits, requests, live, errors)
        hold_the_end(logits, requests, live, self.eos_ids)
        toks = sample_tokens(logits, requests, [row.gen for row in rows], live, errors)
        logp = torch.log_softmax(logits, dim=-1)
        tok_lp = logp[torch.tensor(live, device=logits.device), toks.to(logits.device)].tolist()
        tops = top_alternatives(logp, requests, live)
        next_tok = [pad] * len(rows)  # one tensor made of it: no per-row tensor writes
        for i, tok, lp in zip(live, toks.tolist(), tok_lp):
            row = rows[i]
            if i in errors or not self._accepted(row, tok, i, errors):
                row.finish = "error"
                continue
            top = tops.get(i, [])
            row.ids.append(tok)
            row.request.generated += 1
            row.lps.append(lp)
            row.tops.append(top)
            next_tok[i] = tok
            out = TokenOut(tok, lp, row.text.push(tok), top)
            row.finish = advance(i, out, row.ids, row.text.text, row.request, self.eos_ids, errors)
        for i, why in errors.items():
            rows[i].error = why
        return torch.tensor(next_tok, dtype=torch.long)

    def _accepted(self, row: Row, tok: int, i: int, errors: dict[int, str]) -> bool:
        """`accepted`, timed as constrained decoding where the row has a grammar (a row without takes any token)."""
        if row.request.constraint is None:
            return True
        with self.clock.timed("constrain_s"):
            return accepted(row.request.constraint, tok, i, errors)

    def results(self) -> list[GenResult]:
        """Each request's outcome, in request order (those that joined after the first ones, in their order)."""
        placed = {**self.done, **{row.place: row.result() for row in self.rows}}
        return [placed[k] for k in sorted(placed)]

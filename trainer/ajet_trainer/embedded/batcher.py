"""The embedded engine's batcher: requests are queued and micro-batched on one worker thread.

The worker takes everything waiting (up to `max_batch`) and samples it in one left-padded batch
(`generation.generate_batch`). A request that arrives while a batch runs joins it at the next token boundary
(continuous batching, `embedded.joining`), up to `max_batch` rows in all. Where the model's KV cache cannot take rows,
it waits for the next batch instead, and the worker waits for the burst that follows its first request
(`gather_window`) before it starts one. The batcher owns the
weights' lock and the policy version: a batch runs under the lock and stamps its answers with the version it ran
under, and `paused(version)` is the one way to change weights (the trainer's update) and version together, between
two batches.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from ajet_trainer.embedded.generation import Decoding, generate_batch
from ajet_trainer.embedded.joining import copyable_cache
from ajet_trainer.embedded.phase_clock import PhaseClock
from ajet_trainer.embedded.prefix_cache import PrefixCache
from ajet_trainer.embedded.types import ABORT, GenRequest, GenResult, TokenOut
from ajet_trainer.errors import GenerationFailed
from ajet_trainer.types import PolicyModel, Tokenizer

logger = logging.getLogger(__name__)

GATHER_GAP_SHARE = 0.05
GATHER_CAP_SHARE = 0.25


@dataclass
class Pending:
    """A request waiting for its batch, and where its results go (futures of the HTTP side's event loop)."""

    req: GenRequest
    """What to sample."""
    loop: asyncio.AbstractEventLoop
    """The event loop the request's handler waits on."""
    done: asyncio.Future
    """Its `GenResult` (or the `GenerationFailed` that ended it)."""
    started: asyncio.Future
    """The policy version its batch runs under, once it starts."""
    tokens: Optional[asyncio.Queue] = None
    """A streamed request's tokens, as they are sampled."""
    emitted: int = 0
    """Tokens already handed to the stream (counted in the batcher thread: a failed batch cannot retry them)."""

    def emit(self, out: TokenOut) -> None:
        """The streaming callback: count the token, queue it for the HTTP side."""
        self.emitted += 1
        tokens = self.tokens
        assert tokens is not None  # only streamed requests emit
        self.loop.call_soon_threadsafe(tokens.put_nowait, out)


class Batcher:
    """Micro-batches the engine's requests on one worker thread."""

    def __init__(
        self,
        model: PolicyModel,
        tokenizer: Tokenizer,
        eos_ids: set[int],
        max_batch: int,
        window_s: float,
        policy_version: int,
        prefix_cache_bytes: int = 0,
    ):
        self.model, self.tokenizer, self.eos_ids = model, tokenizer, eos_ids
        self.max_batch, self.window_s = max_batch, window_s
        self.policy_version = policy_version
        """The version of the weights batches now run under (changed only through `set_version`)."""
        self.versions: dict[str, int] = {}
        """The version of each adapter that has one of its own (experiments sharing this base: `shared_base.py`);
        a row of another adapter, or of none, runs under `policy_version`. Changed only by `set_version`, `forget`."""
        self.prefixes = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None
        """Answered calls' keys and values, where their episodes' next calls start (None: off; pruned by versions)."""
        self.weights_lock = threading.Lock()
        """Held for each batch, and by `paused`: no batch sees half-updated weights."""
        self.partial_rollouts = False
        """On: an update no longer waits for the running batch. Its rows stop at a token boundary, the update runs,
        and they go on under the new weights (re-prefilled; `GenResult.version_spans` says which token came from
        which version). Off: an update waits for the batch to end."""
        self._update_wanted = threading.Event()
        """Set while an update waits for the weights (`paused`): a batch with partial rollouts yields to it."""
        self._handoff = threading.Event()
        """Set by `paused` once it holds the weights: the yielding batch waits for it before taking them back."""
        self.stats = {"batches": 0, "max_batch_seen": 0, "joined": 0, "aborted": 0, "aborted_late_tokens_max": 0,
                      "suspended": 0, "reprefilled_tokens": 0, "answers": 0, "answer_tokens": 0}  # fmt: skip
        """`aborted`: rows whose client left (before or while they ran); `aborted_late_tokens_max`: the most
        tokens any of them sampled after its client left (the one in flight at most); `suspended`: batches that
        yielded to an update mid-answer, `reprefilled_tokens`: the tokens they ran again under the new weights;
        `joined`: requests that joined a running batch; `max_batch_seen`: the most rows a batch held at once."""
        self.answered: dict[Optional[str], list[int]] = {}
        """Per adapter (None: none), its answers and their tokens: `stats`' two, split by experiment."""
        self.busy_s, self.clock = 0.0, PhaseClock()
        """Seconds sampling since the start, an update's waits left out (the busy share); `clock`: where they went."""
        self._busy_since = 0.0  # when the running batch last started sampling (its start, or back from an update)
        self.last_batch_s = 0.0
        """How long batches take lately (a decaying max): `gather_window` scales the next batch's gathering by it."""
        self.running: list[Pending] = []
        """The batch being sampled now, the rows that joined it included (empty between batches)."""
        self.joins = model is not None and copyable_cache(model.config)
        """Whether requests join a running batch (its KV cache takes rows): a batch starts without the burst's rest."""
        self._next: list[Pending] = []  # requests that failed to join the running batch: the next one starts with them
        self._q: "queue.Queue[Optional[Pending]]" = queue.Queue()
        self._clock = time.monotonic  # a test's simulated clock proves the gathering without waiting on threads
        self._worker = threading.Thread(target=self._work, name="ajet-engine-batcher", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._worker.start()

    def stop(self) -> None:
        """End the worker after the batch it runs (queued requests are never started)."""
        self._q.put(None)

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the worker to end (after `stop`)."""
        self._worker.join(timeout)

    def submit(self, pending: Pending) -> None:
        """Queue a request for the next batch."""
        self._q.put(pending)

    def version_of(self, adapter: Optional[str]) -> int:
        """The version a row of `adapter` runs under now."""
        return self.versions.get(adapter, self.policy_version) if adapter else self.policy_version

    def set_version(self, version: int, adapter: Optional[str] = None) -> None:
        """Rows of `adapter` (None: of no adapter, and of adapters without a version of their own) run under `version`
        from their next token: a publish, or an adapter added at its version 0."""
        if adapter:
            self.versions[adapter] = version
        else:
            self.policy_version = version
        if self.prefixes is not None:
            self.prefixes.retain(self.version_of)

    def forget(self, adapter: str) -> None:
        """Adapter `adapter` is gone from the model: its version goes too."""
        self.versions.pop(adapter, None)
        if self.prefixes is not None:
            self.prefixes.forget(adapter)

    @contextmanager
    def paused(self, next_version: Optional[int] = None, adapter: Optional[str] = None) -> Iterator[None]:
        """Hold batches off (the trainer changes the weights meanwhile); on exit they run under `next_version` (the
        version of `adapter` alone, when named). With partial rollouts a running batch yields at its next token
        boundary, else it ends first."""
        self._handoff.clear()
        self._update_wanted.set()
        with self.weights_lock:
            self._update_wanted.clear()
            self._handoff.set()
            yield
            if next_version is not None:
                self.set_version(next_version, adapter)

    def _work(self) -> None:
        while True:
            batch = self._gather()
            if batch is None:
                return
            t0 = time.monotonic()
            self._run_batch(batch)
            # a decaying max: one short batch (a step's stragglers) does not shrink the next burst's window
            self.last_batch_s = max(time.monotonic() - t0, 0.5 * self.last_batch_s)

    def _gather(self) -> Optional[list[Pending]]:
        """The next batch: what failed to join the last one, else the first request waiting, and those that arrive in
        its burst (None: stopped)."""
        batch, self._next = self._next[: self.max_batch], self._next[self.max_batch :]
        if not batch:
            first = self._q.get()
            if first is None:
                return None
            batch = [first]
        gap, cap = (self.window_s, self.window_s) if self.joins else gather_window(self.window_s, self.last_batch_s)
        start = last = self._clock()
        while len(batch) < self.max_batch:
            item = self._queued(max(0.0, min(start + cap, last + gap) - self._clock()))
            if item is None:
                break
            batch.append(item)
            last = self._clock()
        return batch

    def _queued(self, timeout: float) -> Optional[Pending]:
        """The next queued request, if one comes within `timeout` seconds (0: only one already waiting); None when
        none came, or at a stop mark (left queued for the worker)."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._q.put(None)
        return item

    def _run_batch(self, batch: list[Pending]) -> None:
        batch = self._without_the_gone(batch)
        if not batch:
            return
        with self.weights_lock:
            versions = [self.version_of(p.req.adapter) for p in batch]
            for p, version in zip(batch, versions):
                p.loop.call_soon_threadsafe(_set, p.started, version)
            self.stats["batches"] += 1
            self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(batch))
            self.running = batch  # rows that join the batch are appended to it (`_join_waiting`)
            try:
                results = self._generate([p.req for p in batch], versions)
            except Exception:  # noqa: BLE001 - find the request that fails; the others must not pay for it
                logger.exception("generation failed for a batch of %d; serving its requests one by one", len(batch))
                results = [self._alone(p) for p in batch]
            finally:
                self.running = []
        for p, res in zip(batch, results):
            if res is None:
                continue
            res.policy_version = res.version_spans[0][1]  # the version its first token was sampled under
            if res.finish_reason == ABORT:
                self._count_abort(p.req)
            elif res.error is None:
                self.stats["answers"] += 1
                self.stats["answer_tokens"] += len(res.token_ids)
                mine = self.answered.setdefault(p.req.adapter, [0, 0])
                mine[0], mine[1] = mine[0] + 1, mine[1] + len(res.token_ids)
            if res.error is not None:
                logger.warning("one request failed in its batch: %s", res.error)
                p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed(res.error))
            else:
                p.loop.call_soon_threadsafe(_set, p.done, res)

    def _generate(self, requests: list[GenRequest], version: list[int]) -> list[GenResult]:
        """Sample one batch under the weights' lock (held by the caller), yielding it to an update between two
        tokens when partial rollouts are on."""
        self._busy_since = time.monotonic()
        results = generate_batch(
            self.model, self.tokenizer, requests, self.eos_ids, version, self._between, self.prefixes, self.clock
        )
        self.busy_s += time.monotonic() - self._busy_since
        return results

    def _between(self, run: Decoding) -> None:
        """Before each token of the running batch: yield it to a waiting update (partial rollouts), then take in the
        requests that wait."""
        self._yield_if_wanted(run)
        if self.joins and run.joinable():
            self._join_waiting(run)

    def _join_waiting(self, run: Decoding) -> None:
        """Requests queued since the batch started join it (prefilled apart, then sampled with it), up to `max_batch`
        live rows in all (the ended ones leave first); none while an update waits for the weights, which the batch
        would then hold on to."""
        if self._update_wanted.is_set() or self._q.empty():
            return
        run.compact()  # the rows that ended make room
        room = self.max_batch - len(run.requests)
        if room <= 0:
            return
        more = self._without_the_gone(self._take(room))
        if not more:
            return
        versions = [self.version_of(p.req.adapter) for p in more]
        try:
            joining = Decoding(
                self.model, self.tokenizer, [p.req for p in more], self.eos_ids, versions, self.prefixes, self.clock
            )
        except Exception:  # noqa: BLE001 - the running batch goes on; these start the next batch (and fail there alone)
            logger.exception("%d requests could not join the running batch; they start the next one", len(more))
            self._next.extend(more)
            return
        run.absorb(joining)
        for p, version in zip(more, versions):
            p.loop.call_soon_threadsafe(_set, p.started, version)
        self.running.extend(more)
        self.stats["joined"] += len(more)
        self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(run.requests))

    def _take(self, most: int) -> list[Pending]:
        """Up to `most` queued requests, without waiting (a stop mark stays queued for the worker)."""
        taken: list[Pending] = []
        while len(taken) < most and (item := self._queued(0.0)) is not None:
            taken.append(item)
        return taken

    def _yield_if_wanted(self, run: Decoding) -> None:
        """With partial rollouts and an update waiting: hand it the weights, then go on under the new ones (the
        batch's rows re-prefilled). The wait is not busy time."""
        if not (self.partial_rollouts and self._update_wanted.is_set()):
            return
        self.busy_s += time.monotonic() - self._busy_since
        self.weights_lock.release()
        try:
            self._handoff.wait()  # the update holds the weights now
        finally:
            self.weights_lock.acquire()
        self._busy_since = time.monotonic()
        self.stats["suspended"] += 1
        self.stats["reprefilled_tokens"] += run.reprefill([self.version_of(r.adapter) for r in run.requests])

    def _without_the_gone(self, batch: list[Pending]) -> list[Pending]:
        """The batch without the requests whose client left while they waited (never started)."""
        for p in batch:
            if p.req.cancelled.is_set():
                self._count_abort(p.req)
                p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed("the client went away"))
        return [p for p in batch if not p.req.cancelled.is_set()]

    def _count_abort(self, req: GenRequest) -> None:
        late = req.generated - (req.generated_at_cancel or 0)
        self.stats["aborted"] += 1
        self.stats["aborted_late_tokens_max"] = max(self.stats["aborted_late_tokens_max"], late)

    def _alone(self, p: Pending) -> Optional[GenResult]:
        """Serve one request of a failed batch by itself (a stream that already sent tokens cannot restart)."""
        if p.emitted:
            p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed("its batch failed mid-stream"))
            return None
        try:
            version = self.version_of(p.req.adapter)
            return generate_batch(self.model, self.tokenizer, [p.req], self.eos_ids, version, clock=self.clock)[0]
        except Exception as exc:  # noqa: BLE001 - answer this request, keep serving
            logger.exception("generation failed for one request")
            p.loop.call_soon_threadsafe(_fail, p.done, GenerationFailed(f"{type(exc).__name__}: {exc}"))
            return None


def gather_window(window_s: float, last_batch_s: float) -> tuple[float, float]:
    """How a batch is gathered after its first request: (gap, cap). Requests join while each arrives within `gap`
    of the one before, for at most `cap` in all. A batch runs to its end before the next starts, so a request just
    missed waits a whole batch: when batches are long (64 tokens of a 4-layer model on a CPU: ~1.2 s for 128
    answers), gaps of a twentieth of that (and at most a quarter in all) keep a burst of episodes in one batch;
    when they are short (the demo's one token), `window_s` alone bounds both."""
    return max(window_s, GATHER_GAP_SHARE * last_batch_s), max(window_s, GATHER_CAP_SHARE * last_batch_s)


def _set(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)

"""The embedded engine's prefix cache: the keys and values of an episode's last call (its prompt and answer), kept so
that its next call, whose prompt extends those ids (the token history guarantees it), prefills only its new tokens.

An entry serves a prompt that shares at least `MIN_TOKENS` leading ids with it (the longest such share wins, up to
one token short of the prompt: the last token's logits are computed anew). Entries are per adapter and per policy
version: a row takes only an entry of its own adapter made under the version it runs under, and `retain` drops the
entries of weights an update replaced. Their keys and values are the old policy's, so a call started from them
would not sample what the new weights sample; they are dropped, not kept per version (partial rollouts run an
interrupted row's prompt and answer again under the new weights anyway, `Decoding.reprefill`).

Bounded in bytes (`max_bytes`), the least recently used entry evicted first. An entry that a newer one extends (the
episode's call before, now served) is dropped when the newer one is kept: one entry per live episode.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional

import torch

MIN_TOKENS = 16
"""The fewest shared leading ids worth starting from (fewer: the prompt is prefilled whole)."""

KeysValues = tuple[torch.Tensor, torch.Tensor]
"""One layer's keys and values of one row: (1, kv heads, tokens, head size) each."""


@dataclass
class Prefix:
    """The kept keys and values of one row's tokens."""

    ids: torch.Tensor
    """The tokens (1-D, long, on the CPU): the call's prompt and the answer tokens the model ran."""
    adapter: Optional[str]
    """The adapter that ran them (None: the model as it is)."""
    version: int
    """The policy version of the weights that ran them."""
    layers: list[KeysValues]
    """Per layer, their keys and values."""
    nbytes: int = 0
    """The memory they hold."""


@dataclass(frozen=True)
class Hit:
    """A prompt's leading tokens found in the cache."""

    prefix: Prefix
    """The entry."""
    length: int
    """How many of the prompt's leading tokens it holds (at most one short of the prompt)."""

    def layers(self) -> list[KeysValues]:
        """The keys and values of those `length` tokens."""
        return [(k[:, :, : self.length], v[:, :, : self.length]) for k, v in self.prefix.layers]


@dataclass
class PrefixStats:
    """What the cache did since the engine started."""

    hits: int = 0
    """Rows that started from an entry."""
    hit_tokens: int = 0
    """The prompt tokens those rows did not prefill."""
    misses: int = 0
    """Rows looked up that found none (a first call, another adapter, an update since, or evicted)."""
    kept: int = 0
    """Rows whose tokens were kept."""
    evicted: int = 0
    """Entries dropped for room (not those superseded or of replaced weights)."""


def common_length(a: torch.Tensor, b: torch.Tensor) -> int:
    """How many leading ids two 1-D id tensors share."""
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if len(differ) else n


@dataclass
class PrefixCache:
    """Kept prefixes, bounded in bytes, least recently used evicted first. Thread-safe: the engine's batcher looks up
    and keeps; an update, on another thread, retains."""

    max_bytes: int
    """The most memory the entries may hold (0: nothing is kept)."""
    stats: PrefixStats = field(default_factory=PrefixStats)
    _entries: "OrderedDict[int, Prefix]" = field(default_factory=OrderedDict)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def nbytes(self) -> int:
        """The memory the entries hold now."""
        return sum(p.nbytes for p in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, prompt_ids: Sequence[int], adapter: Optional[str], version: int) -> Optional[Hit]:
        """The entry of `adapter` at `version` that shares the most leading ids with the prompt (at least
        `MIN_TOKENS`), marked recently used; None when there is none."""
        prompt = torch.tensor(prompt_ids, dtype=torch.long)
        best: Optional[tuple[int, int]] = None  # (length, entry key)
        with self._lock:
            for key, entry in self._entries.items():
                if entry.adapter != adapter or entry.version != version:
                    continue
                length = min(common_length(entry.ids, prompt), len(prompt) - 1)
                if length >= MIN_TOKENS and (best is None or length > best[0]):
                    best = (length, key)
            if best is None:
                self.stats.misses += 1
                return None
            self._entries.move_to_end(best[1])
            self.stats.hits += 1
            self.stats.hit_tokens += best[0]
            return Hit(self._entries[best[1]], best[0])

    def keep(self, ids: Sequence[int], adapter: Optional[str], version: int, layers: list[KeysValues]) -> None:
        """Keep a row's tokens and their keys and values (copies the caller no longer changes); the entries it extends
        go, then the least recently used ones until all fit. An entry larger than the whole cache is not kept."""
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        if len(ids) < MIN_TOKENS or nbytes > self.max_bytes:
            return
        entry = Prefix(torch.tensor(list(ids), dtype=torch.long), adapter, version, layers, nbytes)
        with self._lock:
            self._drop(lambda p: p.adapter == adapter and p.version == version and _extends(entry.ids, p.ids))
            self._entries[self._next] = entry
            self._next += 1
            self.stats.kept += 1
            total = self.nbytes
            while total > self.max_bytes:
                _, gone = self._entries.popitem(last=False)
                total -= gone.nbytes
                self.stats.evicted += 1

    def retain(self, version_of: Callable[[Optional[str]], int]) -> None:
        """Drop every entry whose adapter runs under another version now (`version_of`: an adapter's version)."""
        with self._lock:
            self._drop(lambda p: p.version != version_of(p.adapter))

    def forget(self, adapter: str) -> None:
        """Drop the entries of an adapter that left the model."""
        with self._lock:
            self._drop(lambda p: p.adapter == adapter)

    def _drop(self, gone: Callable[[Prefix], bool]) -> None:
        for key in [k for k, p in self._entries.items() if gone(p)]:
            del self._entries[key]


def _extends(ids: torch.Tensor, shorter: torch.Tensor) -> bool:
    """Whether `ids` starts with every id of `shorter`."""
    return len(shorter) <= len(ids) and common_length(ids, shorter) == len(shorter)


def stacked(hits: Sequence[Optional[Hit]]) -> tuple[list[KeysValues], torch.Tensor]:
    """The rows' found keys and values as one batch, left-padded to the longest (a row without a hit: all padding):
    per layer (keys, values) of (rows, kv heads, tokens, head size), and the rows' attention mask over those tokens
    (1: a found one). At least one row has a hit."""
    width = max(h.length for h in hits if h is not None)
    rows = [h.layers() if h is not None else None for h in hits]
    like = next(r for r in rows if r is not None)
    mask = torch.zeros((len(hits), width), dtype=torch.long)
    for i, h in enumerate(hits):
        if h is not None:
            mask[i, width - h.length :] = 1
    layers = []
    for index, (k0, v0) in enumerate(like):
        keys = [_padded(r[index][0] if r is not None else None, k0, width) for r in rows]
        values = [_padded(r[index][1] if r is not None else None, v0, width) for r in rows]
        layers.append((torch.cat(keys), torch.cat(values)))
    return layers, mask


def _padded(t: Optional[torch.Tensor], like: torch.Tensor, width: int) -> torch.Tensor:
    """`t` with zeros before it to `width` tokens (all zeros, shaped as `like`, when None)."""
    out = like.new_zeros((1, like.shape[1], width, like.shape[3]))
    if t is not None:
        out[:, :, width - t.shape[2] :] = t
    return out

"""Rows of a batch that share or join its KV cache: the tensor steps, as pure functions.

Rows with the same prompt (a GRPO group's first turn: one task, many episodes) are prefilled once and their cache
copied to each (`distinct_rows`, `select_rows`): a group of 16 costs one prompt's prefill, not 16.

A batch is left-padded: every row's KV cache and attention mask have the batch's width, a row's own tokens at the
right. Rows prefilled apart (a request that arrived after its batch started) join it by padding the narrower side on
the left to the wider width and stacking the rows. Positions are per row (`cumsum - 1` of its own mask), so padding
never shifts them, and a padded slot is masked, so it is never attended.

Only caches of transformers' plain `DynamicCache` of full-attention layers join: a sliding window, a quantized or a
static cache keeps the batch as it was started (`joinable` says no and the request waits for the next batch).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Optional

import torch
import torch.nn.functional as F


def joinable(cache: Any) -> bool:
    """Whether rows can be added to `cache`: a `DynamicCache` whose every layer is a full-attention `DynamicLayer`."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    layers = getattr(cache, "layers", None)
    return type(cache) is DynamicCache and bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def copyable_cache(config: Any) -> bool:
    """Whether the cache a model of `config` makes by itself (`DynamicCache(config=...)`, its layers not yet filled)
    is `joinable`: known before a forward, so a prefill can share rows."""
    from transformers.cache_utils import DynamicCache

    return joinable(DynamicCache(config=config))


def distinct_rows(ids: torch.Tensor, extras: Sequence[Hashable]) -> Optional[tuple[list[int], torch.Tensor]]:
    """Rows of `ids` (one prompt per row, left-padded) that are alike (the same ids, the same extra: the adapter and
    the images' hashes) prefilled once: (the first row of each kind, and for every row the index of its kind in that
    list). None when no two rows are alike."""
    first: dict[tuple[Hashable, tuple[int, ...]], int] = {}
    kinds = [first.setdefault((extra, tuple(row)), len(first)) for extra, row in zip(extras, ids.tolist())]
    if len(first) == len(kinds):
        return None
    reps = [kinds.index(k) for k in range(len(first))]
    return reps, torch.tensor(kinds, device=ids.device)


def select_rows(cache: Any, rows: torch.Tensor) -> None:
    """`cache` (`joinable`) with its rows picked (and repeated) by `rows`, in place."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, rows.to(layer.keys.device))
        layer.values = layer.values.index_select(0, rows.to(layer.values.device))


def pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """`t` with zeros before its entries along `dim` (counted from the end when negative), to `width` there."""
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    pads = [0, 0] * (t.dim() - 1 - (dim % t.dim())) + [missing, 0]  # F.pad names the last dimension first
    return F.pad(t, pads)


def join_masks(mask: torch.Tensor, more: torch.Tensor) -> torch.Tensor:
    """The attention masks of two left-padded row sets as one: rows of `mask`, then rows of `more`."""
    width = max(mask.shape[1], more.shape[1])
    return torch.cat([pad_left(mask, width, 1), pad_left(more, width, 1)])


def join_caches(cache: Any, more: Any) -> None:
    """Append `more`'s rows to `cache`, in place (both `joinable`, of the same model): each layer's keys and values,
    padded on the left to the wider of the two sequence lengths."""
    for layer, extra in zip(cache.layers, more.layers):
        width = max(layer.keys.shape[-2], extra.keys.shape[-2])
        layer.keys = torch.cat([pad_left(layer.keys, width, -2), pad_left(extra.keys, width, -2)])
        layer.values = torch.cat([pad_left(layer.values, width, -2), pad_left(extra.values, width, -2)])


def cache_holding(config: Any, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """A `DynamicCache` of a model of `config` (`copyable_cache`) that holds `layers`: per layer, every row's keys and
    values."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=config)
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache


def row_tokens(cache: Any, row: int, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of one row's keys and values at `positions` of `cache` (`joinable`), per layer."""
    positions = positions.to(cache.layers[0].keys.device)
    return [
        (layer.keys[row : row + 1].index_select(2, positions), layer.values[row : row + 1].index_select(2, positions))
        for layer in cache.layers
    ]

"""Giving the operating system back the memory an update freed.

An update's activations are many tensors of a few MiB each (SmolLM2-135M with LoRA on every linear layer keeps more
than a MiB a token for the backward pass, in float32), most under glibc's dynamic mmap threshold, so freeing them
returns them to the allocator's heap, not to the system: the trainer's resident memory stays at the update's peak
between steps, for every experiment it trains, while the engine beside it and the other processes of the box could
use it. `malloc_trim(0)` hands the heap's free pages back. Where the C library is not glibc (macOS, musl) there is
nothing to call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Callable, Optional

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's `malloc_trim`, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def give_back_freed_memory() -> bool:
    """Return the allocator's free pages to the system; False where that cannot be done here."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

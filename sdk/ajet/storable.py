"""What the store can keep as sent: the checks a request body's free-form values pass before any database sees
them (both databases of the store must keep a value, or one client's value would fail a transaction it shares with
others), and what an episode uuid can be."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Optional

from pydantic import Field

__all__ = ["EPISODE_UUID_PATTERN", "EpisodeUuid", "check_storable", "unstorable"]


def unstorable(value: Any, path: str, keys_only: bool = False) -> Optional[str]:
    """Why JSON `value` (at dotted `path`) cannot be stored as sent, else None. Both databases of the store must
    keep it: PostgreSQL refuses a NUL character in text and a non-finite number in JSON, which SQLite takes, so
    one client's value would otherwise fail the transaction it shares with others. `keys_only`: only the keys of
    its objects are looked at."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, str) and "\x00" in v and not keys_only:
            return f"{where}: a NUL character (\\u0000) cannot be stored"
        if isinstance(v, float) and not math.isfinite(v) and not keys_only:
            return f"{where}: {v} is not a finite number"
        if isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str) and "\x00" in k:
                    return f"{where}: a key with a NUL character (\\u0000) cannot be stored"
                if isinstance(k, str) and _lone_surrogate(k):
                    return f"{where}: the key {k!r} holds a lone UTF-16 surrogate, which cannot be stored as sent"
                stack.append((f"{where}.{k}", item))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(v))
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(text: str) -> bool:
    """Whether `text` holds a UTF-16 surrogate code point (JSON's `"\\ud800"` unpaired): no UTF-8 text can hold it,
    and a dict key holding one would be rewritten (as U+FFFD) by validation, so it is refused instead."""
    return _SURROGATE.search(text) is not None


def check_storable(value: Any, path: str) -> Any:
    """A field validator's body: `value` unchanged, or the ValueError that names what cannot be stored."""
    why = unstorable(value, path)
    if why is not None:
        raise ValueError(why)
    return value


EPISODE_UUID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
"""What an episode uuid can be: the proxy mints 32 hex digits; letters, digits and `._:-`, at most the store's 64
characters, are let through (stores written by hand and tests use such names). Anything else (a NUL, a slash, a
space) names no episode and is refused as a malformed field (422) before any store is asked: PostgreSQL would
refuse the NUL itself, which the store could only report as its own failure."""

EpisodeUuid = Annotated[str, Field(pattern=EPISODE_UUID_PATTERN)]
"""An episode uuid in a request body (`EPISODE_UUID_PATTERN`)."""

"""Waiting in tests for a condition another process makes true, with a deadline that names what was awaited."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

_T = TypeVar("_T")


def wait_for(pred: Callable[[], _T], what: str, timeout: float = 120, poll: float = 0.05) -> _T:
    """`pred()`'s first truthy value; fails naming `what` once `timeout` seconds pass without one."""
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)
    return got

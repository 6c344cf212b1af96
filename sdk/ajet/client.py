"""`SwarmClient`: the control-API client, blocking. Thread-safe; it holds no episode state.

Its methods are `ajet.client_surface`'s operations, each run to its answer here with `httpx.Client` and
`time.sleep` (`ajet.client_steps.SyncRunner`); `AsyncSwarmClient` runs the same ones as coroutines.
"""

from __future__ import annotations

from typing import Any

import httpx

from ajet.client_base import POOL_LIMITS
from ajet.client_steps import SyncRunner
from ajet.client_surface import SwarmSurface


class SwarmClient(SwarmSurface[httpx.Client], SyncRunner):
    """Talks to one `ajet-proxy` (one model). Use one per model in multi-model workflows; in an event loop, use
    `AsyncSwarmClient`."""

    def _start(self) -> None:
        self._http = self._given or httpx.Client(
            base_url=self.server_url, headers=self._headers, timeout=self.timeout, limits=POOL_LIMITS
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> "SwarmClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

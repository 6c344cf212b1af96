"""The settings of one proxy process (`ProxyConfig`): `ajet-proxy start`'s options, whose defaults are
`configs/proxy.yaml`.

Each option is declared once, as a field of `ProxyConfig` (`ajet_core.options`): its flag, type, choices and help
come from the field, its default from the YAML. What the proxy derives from them (`limits`, `commit_window_s`,
`shared`) are properties; the process's own constants are fields with defaults.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, Optional

from ajet_core.flags import shipped_with_env
from ajet_core.options import option, options_from_values
from ajet_proxy.limits import InputLimits
from ajet_store.connect import StoreOptions

CONFIG_FILE = "proxy.yaml"
"""The file in `configs/` that holds the proxy's defaults."""


@dataclass(frozen=True)
class ProxyConfig(StoreOptions):
    """Settings of one proxy process: `ajet-proxy start`'s options (each field made with `option()` is a flag and a
    key of configs/proxy.yaml, which holds its default), then the process's own constants."""

    host: str = option()
    """Interface to listen on (0.0.0.0: all of them)."""
    port: int = option()
    """Port of the control API and the data plane."""
    swarm_token: Optional[str] = option()
    """Require this token on control calls (better: the AJET_SWARM_TOKEN environment variable, which `ps` does not
    show)."""
    swarm_token_file: Optional[str] = option()
    """Bound beyond loopback without a token, the swarm makes one and keeps it here (readable by its owner only;
    reused at the next start)."""
    open: bool = option()
    """Bound beyond loopback, take control calls without a token (a trusted network only; the explorer is still
    served to this machine only)."""
    max_body_bytes: int = option()
    """Largest request body accepted, in bytes (413 above it)."""
    max_image_bytes: int = option()
    """Largest image file in a call, in bytes (413 above it, naming the part)."""
    max_image_pixels: int = option()
    """Most pixels one image may decode to (413 above it; a bomb is refused from its header)."""
    commit_window_ms: float = option()
    """Gather answered calls this long before committing them together (0: commit whatever is waiting at once; a
    few ms trade latency for fewer transactions under load); an answer always waits for its commit."""
    gc_young_threshold: int = option()
    """Allocations between two passes of Python's young-generation garbage collector in this process (Python's
    default is 700: a call allocates thousands of short-lived objects, so at 700 the collector runs several times
    per call and walks every object of the calls in flight each time)."""
    transport: Literal["aiohttp", "litellm"] = option()
    """How calls reach the engines: a pooled aiohttp session, or `litellm.Router.acompletion`."""
    workers: int = option()
    """Proxy processes on this port, sharing the store (an episode begun through one works in all)."""
    shared_store: bool = option()
    """Other proxies (on other machines) serve the same store: number calls and track episodes there (implied by
    more than one worker)."""
    engine_timeout_s: float = option()
    """How long one call may wait for its engine (a hung engine with a live trainer; a call whose trainer falls
    silent fails sooner, within `trainer_timeout_s`)."""
    allow_absolute_experiment_dir: bool = option()
    """Let a client's job name an absolute `experiment_dir` on the training box; else `sync_train_config` refuses it
    with a 422 naming `job.experiment_dir`, so a job's folders stay under the trainer's `experiments/`."""
    poll_s: float = 0.2
    """How often the experiment's row is re-read."""
    max_connections: int = 1024
    """Size of the connection pool to the engines."""
    preflight_wait_s: float = 15.0
    """How long `sync_train_config` waits for a beating trainer's template preflight of the job's model before it
    answers without it (the status carries it once it comes)."""

    @functools.cached_property
    def limits(self) -> InputLimits:
        """Bounds on request size and shape."""
        return InputLimits.of(vars(self))

    @property
    def commit_window_s(self) -> float:
        """`commit_window_ms` in seconds, as the call writer waits."""
        return self.commit_window_ms / 1000.0

    @property
    def shared(self) -> bool:
        """Other proxies serve the same store (`--workers N`, `ajet-swarm start --proxies N`, or `--shared-store`):
        call numbers are reserved in the store, an episode begun elsewhere is taken up on its first call here, its
        history is read from the store when another proxy served its calls, and idleness is the store's. One proxy
        alone keeps all of that in memory (one write less per call)."""
        return self.shared_store or self.workers > 1

    @classmethod
    def from_config(cls, **overrides: Any) -> "ProxyConfig":
        """The settings `ajet-proxy start` would run with (`configs/proxy.yaml`, then the environment), with
        `overrides` (field names) on top."""
        return options_from_values(cls, shipped_with_env(CONFIG_FILE), **overrides)

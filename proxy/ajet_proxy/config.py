"""The settings of one proxy process (`ProxyConfig`): what `ajet-proxy start` takes from `configs/proxy.yaml`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from ajet_core.flags import shipped_with_env
from ajet_proxy.limits import InputLimits

CONFIG_FILE = "proxy.yaml"
"""The file in `configs/` that holds the proxy's defaults."""


@dataclass(frozen=True)
class ProxyConfig:
    """Settings of one proxy process. `from_config` fills what `ajet-proxy start` takes from `configs/proxy.yaml`
    (the only source of those defaults); the rest are this class's own."""

    db_url: str
    """SQLAlchemy URL of the store (`db`)."""
    db_mode: int
    """Permissions of the SQLite store file when this process creates it."""
    swarm_token: Optional[str]
    """Required on control calls when set."""
    transport: Literal["aiohttp", "litellm"]
    """How calls reach the engines: a pooled aiohttp session, or `litellm.Router.acompletion`."""
    limits: InputLimits
    """Bounds on request size and shape."""
    commit_window_s: float
    """How long the call log gathers calls after the first before committing them together (0: commit
    whatever is waiting at once; a few ms trade latency for fewer transactions under load)."""
    gc_young_threshold: int
    """Allocations between two passes of Python's young-generation garbage collector in this process (its first
    threshold; Python's default is 700). A call allocates thousands of short-lived objects, so at 700 the
    collector runs several times per call and walks every object of the calls in flight each time."""
    shared: bool
    """Other proxies serve the same store (`--workers N`, `ajet-swarm start --proxies N`, or `--shared-store`):
    call numbers are reserved in the store, an episode begun elsewhere is taken up on its first call here, its
    history is read from the store when another proxy served its calls, and idleness is the store's. One proxy
    alone keeps all of that in memory (one write less per call)."""
    allow_absolute_experiment_dir: bool
    """A client's job may name an absolute `experiment_dir` on the training box (`--allow-absolute-experiment-dir`);
    else `sync_train_config` refuses it with a 422 naming `job.experiment_dir`, so a job's folders stay under the
    trainer's `experiments/` (names and relative paths cannot climb out: `AgentJetJob` refuses `/` and `..`)."""
    engine_timeout_s: float
    """Total time one call may wait for its engine (a hung engine with a live trainer; a trainer that falls silent
    fails its calls sooner: `TRAINER_TIMEOUT_S`)."""
    poll_s: float = 0.2
    """How often the experiment's row is re-read."""
    max_connections: int = 1024
    """Size of the connection pool to the engines."""
    preflight_wait_s: float = 15.0
    """How long `sync_train_config` waits for a beating trainer's template preflight of the job's model before it
    answers without it (the status carries it once it comes)."""

    @classmethod
    def from_config(cls, **overrides: Any) -> "ProxyConfig":
        """The settings `ajet-proxy start` would run with (`configs/proxy.yaml`, then the environment), with
        `overrides` (field names) on top."""
        v = shipped_with_env(CONFIG_FILE)
        fields: dict[str, Any] = {
            "db_url": v["db"],
            "db_mode": int(str(v["db_mode"]), 8),
            "swarm_token": v["swarm_token"],
            "transport": v["transport"],
            "limits": InputLimits.of(v),
            "commit_window_s": float(str(v["commit_window_ms"])) / 1000.0,
            "gc_young_threshold": int(str(v["gc_young_threshold"])),
            "shared": bool(v["shared_store"]) or int(str(v["workers"])) > 1,
            "allow_absolute_experiment_dir": bool(v["allow_absolute_experiment_dir"]),
            "engine_timeout_s": float(str(v["engine_timeout_s"])),
        }
        return cls(**{**fields, **overrides})

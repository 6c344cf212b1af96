"""One proxy process: what its routes share, and its background loops.

`Proxy` owns the HTTP client to the engines and one host per experiment of the swarm (`experiment_host.py`: its
store, call writer, open episodes, engine router). Its loops (on the event loop, with store reads in a thread):
- every `poll_s`: read each experiment's row (the trainer moves its state) and reload its router when its engines
  version changes;
- every second: take up experiments the first store newly lists, expire idle episodes, and forget episodes the
  store no longer has open.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Literal, Optional, TypeVar

import aiohttp

from ajet.errors import EngineUnavailable, ExperimentNotFound, StoreUnavailable
from ajet.job import AgentJetJob
from ajet.sharing import beside_conflict, experiment_of
from ajet.types import ExperimentState
from ajet.utils.flags import shipped_with_env
from ajet_proxy.experiment_host import FIRST, ExperimentHost
from ajet_proxy.limits import InputLimits
from ajet_proxy.open_episodes import OpenEpisode
from ajet_store import Store, experiment_store
from ajet_store.placement import experiment_slug, experiment_url, file_mode_of

logger = logging.getLogger(__name__)
T = TypeVar("T")

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
    poll_s: float = 0.2
    """How often the experiment's row is re-read."""
    engine_timeout_s: float = 600.0
    """Total time allowed for one call to an engine."""
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
            "limits": InputLimits(max_body_bytes=int(str(v["max_body_bytes"]))),
            "commit_window_s": float(str(v["commit_window_ms"])) / 1000.0,
            "gc_young_threshold": int(str(v["gc_young_threshold"])),
            "shared": bool(v["shared_store"]) or int(str(v["workers"])) > 1,
            "allow_absolute_experiment_dir": bool(v["allow_absolute_experiment_dir"]),
        }
        return cls(**{**fields, **overrides})


class Proxy:
    """Everything the routes share; created once per app. Each experiment of the swarm has its host here
    (`hosts`: the first store's under `FIRST`, then each one it lists, taken up as they appear)."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.hosts: dict[str, ExperimentHost] = {
            FIRST: ExperimentHost(FIRST, Store(config.db_url, config.db_mode), config)
        }
        self.counters = {"requests": 0, "errors": 0}
        self._http: Optional[aiohttp.ClientSession] = None  # created in the event loop, by `lifespan`
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def first(self) -> ExperimentHost:
        """The host of the swarm's first experiment (the one `--db` names)."""
        return self.hosts[FIRST]

    def host_of(self, ep: OpenEpisode) -> ExperimentHost:
        """The host of an open episode's experiment."""
        return self.hosts[ep.experiment]

    def host_named(self, name: Optional[str]) -> ExperimentHost:
        """The host of the experiment called `name` (its job's `project_name/experiment_name`; None or the first
        experiment's own name: the first); one the first store lists but this proxy has not taken up yet is taken
        up now; `ExperimentNotFound` for a name the swarm does not have."""
        job = self.first.experiment.job
        if not name or (job is not None and name == experiment_of(job)):
            return self.first
        host = self.hosts.get(experiment_slug(name))
        if host is None and experiment_slug(name) in self.take_up_experiments():
            host = self.hosts[experiment_slug(name)]
        if host is None:
            raise ExperimentNotFound(f"this swarm has no experiment {name!r}")
        return host

    def host_for_job(self, job: AgentJetJob, replace: bool = False) -> ExperimentHost:
        """The host of the experiment a sync of `job` acts on (blocking: it may make a store). By the job's name: an
        experiment of that name; else the first experiment while it is OFFLINE or has no job (it takes the job, as a
        swarm of one experiment always did); else a new experiment beside the others, when what the swarm shares
        agrees with the first experiment's job; else, with `replace` (a forced restart), the first experiment, whose
        job it replaces; else `JobConflict` naming why it cannot run beside."""
        name, first = experiment_of(job), self.first
        if first.experiment.job is not None and name == experiment_of(first.experiment.job):
            return first
        slug = experiment_slug(name)
        if slug in self.hosts or slug in self.take_up_experiments():
            return self.hosts[slug]
        row = first.refresh_experiment()
        if row.job is None or row.state == ExperimentState.OFFLINE:
            return first
        conflict = beside_conflict(row.job, job)
        if conflict is not None and replace:
            return first
        if conflict is not None:
            raise conflict
        experiment_store(first.store, name).close()
        self.take_up_experiments()
        return self.hosts[slug]

    # ------------------------------------------------------------------ life cycle
    @asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        """Start each experiment's host, run the loops; flush on exit."""
        self.first.start()
        self.take_up_experiments()
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.config.max_connections, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=self.config.engine_timeout_s),
            auto_decompress=False,
        )
        self._tasks = [asyncio.create_task(self._poll_experiments()), asyncio.create_task(self._housekeeping())]
        gc.collect()
        gc.freeze()  # start-up objects (pydantic, litellm when loaded) stay out of every later GC pass
        thresholds = gc.get_threshold()
        gc.set_threshold(self.config.gc_young_threshold, *thresholds[1:])
        opened = sum(len(h.open_episodes) for h in self.hosts.values())
        logger.info("proxy ready: %d experiment(s), %d open episode(s)", len(self.hosts), opened)
        try:
            yield
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            gc.set_threshold(*thresholds)
            await self.http.close()
            for host in self.hosts.values():
                host.stop()
            logger.info("proxy stopped; %d calls written", sum(h.writer.written for h in self.hosts.values()))

    def take_up_experiments(self) -> list[str]:
        """Start a host for each experiment the first store lists that this proxy does not serve yet; their slugs."""
        new = [e for e in self.first.store.experiment_entries() if e.slug not in self.hosts]
        for entry in new:
            url = experiment_url(self.config.db_url, entry.slug)
            host = ExperimentHost(entry.slug, Store(url, file_mode_of(self.config.db_url)), self.config)
            host.start()
            self.hosts[entry.slug] = host
            logger.info("serving experiment %s", entry.name)
        return [e.slug for e in new]

    @property
    def http(self) -> aiohttp.ClientSession:
        """The pooled HTTP client to the engines (exists while the app runs)."""
        if self._http is None:
            raise EngineUnavailable("the proxy is not serving yet")
        return self._http

    # ------------------------------------------------------------------ loops
    async def _poll_experiments(self) -> None:
        away: Optional[float] = None  # since when the store refuses reads (a database restart): said once
        while True:
            try:
                for host in list(self.hosts.values()):
                    await host.poll()
                if away is not None:
                    logger.warning("the store is back after %.1fs", time.monotonic() - away)
                    away = None
            except StoreUnavailable as exc:  # calls and control routes answer 503 naming it meanwhile
                if away is None:
                    away = time.monotonic()
                    logger.warning("the store is away (%s): answering 503 until it is back", exc.detail)
            except Exception:  # noqa: BLE001 - a transient store error must not kill the loop
                logger.exception("reading the experiment failed")
            await asyncio.sleep(self.config.poll_s)

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await asyncio.to_thread(self.take_up_experiments)
                for host in list(self.hosts.values()):
                    await host.tidy()
            except Exception:  # noqa: BLE001
                logger.exception("housekeeping failed")

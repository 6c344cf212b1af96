"""One proxy process: what its routes share, and its background loops.

`Proxy` owns the HTTP client to the engines and one host per experiment of the swarm (`experiment_host.py`: its
store, call writer, open episodes, engine router). Its loops (on the event loop, with store reads in a thread):
- every `poll_s`: read each experiment's row (the trainer moves its state) and reload its router when its engines
  version changes;
- every second: beat in the first store (a shared store: the live proxies split each experiment's
  `max_calls_in_flight`, `call_gate.proxy_share`), take up experiments the catalog newly lists, expire idle episodes,
  and forget episodes the store no longer has open.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional, TypeVar

import aiohttp

from ajet.errors import EngineUnavailable, ExperimentNotFound, StoreUnavailable
from ajet.job import AgentJetJob
from ajet.sharing import beside_conflict, experiment_of
from ajet.types import ExperimentState
from ajet_proxy.call_gate import proxy_share
from ajet_proxy.config import ProxyConfig
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.open_episodes import OpenEpisode
from ajet_store import Catalog, Store
from ajet_store.placement import DEFAULT_SLUG, slug_for
from ajet_store.types import ExperimentRow

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Proxy:
    """Everything the routes share; created once per app. Each experiment of the swarm has its host here (`hosts`, by
    slug: the default experiment's from the start, each other the catalog lists taken up as it appears)."""

    def __init__(self, config: ProxyConfig):
        self.config = config
        self.catalog = Catalog(Store(config.db_url, config.db_mode, config.trainer_timeout_s))
        self.hosts: dict[str, ExperimentHost] = {
            DEFAULT_SLUG: ExperimentHost(DEFAULT_SLUG, self.catalog.open(DEFAULT_SLUG), config)
        }
        self.proxy_id = uuid.uuid4().hex
        """This proxy among the swarm's (`ajet_store.proxies`)."""
        self.proxies: list[str] = [self.proxy_id]
        """The live proxies of the swarm at the last beat, sorted (itself alone unless the store is shared)."""
        self._no_share: set[str] = set()  # slugs whose swarm-wide cap leaves this proxy no call (said once in the log)
        self.counters = {"requests": 0, "errors": 0}
        self._http: Optional[aiohttp.ClientSession] = None  # created in the event loop, by `lifespan`
        self._tasks: list[asyncio.Task[Any]] = []
        self._taking_up = threading.Lock()

    @property
    def default(self) -> ExperimentHost:
        """The host of the swarm's default experiment (whose store `--db` names)."""
        return self.hosts[DEFAULT_SLUG]

    def host_of(self, ep: OpenEpisode) -> ExperimentHost:
        """The host of an open episode's experiment."""
        return self.hosts[ep.experiment_slug]

    def known_host(self, name: Optional[str]) -> Optional[ExperimentHost]:
        """The host of the experiment called `name` (its job's `project_name/experiment_name`, `placement.slug_for`)
        among those this proxy serves already; None otherwise. Reads no store."""
        job = self.default.experiment.job
        return self.hosts.get(slug_for(name, experiment_of(job) if job is not None else None))

    def host_named(self, name: Optional[str]) -> ExperimentHost:
        """`known_host`, else (blocking: it reads the first store) one the catalog lists but this proxy has not
        taken up yet, taken up now; `ExperimentNotFound` for a name the swarm does not have."""
        host = self.known_host(name)
        if host is None:
            self.take_up_experiments()
            host = self.known_host(name)
        if host is None:  # another worker's sync may have just named the default experiment: the store says
            self.default.refresh_experiment()
            host = self.known_host(name)
        if host is None:
            raise ExperimentNotFound(f"this swarm has no experiment {name!r}")
        return host

    def host_by_slug(self, slug: str) -> ExperimentHost:
        """The host of experiment `slug`, taken up now if the catalog lists it and this proxy has not yet (blocking);
        `ExperimentNotFound` otherwise."""
        if slug not in self.hosts:
            self.take_up_experiments()
        if slug not in self.hosts:
            raise ExperimentNotFound(f"this swarm has no experiment {slug!r}")
        return self.hosts[slug]

    def listed(self) -> list[tuple[str, str]]:
        """(name, slug) of every experiment of the swarm, the default first."""
        return [(e.name, e.slug) for e in self.catalog.entries()]

    def host_for_job(self, job: AgentJetJob, replace: bool = False) -> ExperimentHost:
        """The host of the experiment a sync of `job` acts on (blocking: it may make a store). By the job's name: an
        experiment of that name; else the default experiment while it is OFFLINE or has no job (it takes the job, as a
        swarm of one experiment always did); else a new experiment beside the others, when what the swarm shares
        agrees with the default experiment's job; else, with `replace` (a forced restart), the default experiment,
        whose job it replaces; else `JobConflict` naming why it cannot run beside."""
        name, default = experiment_of(job), self.default
        row = default.refresh_experiment()  # the newest: another client's sync may have just named the default
        slug = slug_for(name, experiment_of(row.job) if row.job is not None else None)
        if slug in self.hosts or slug in self.take_up_experiments():
            return self.hosts[slug]
        if row.job is None or row.state == ExperimentState.OFFLINE:
            return default
        conflict = beside_conflict(row.job, job, trainer_alone(row, self.catalog.first.trainer_timeout_s))
        if conflict is not None and replace:
            return default
        if conflict is not None:
            raise conflict
        self.catalog.add(name).close()
        self.take_up_experiments()
        return self.hosts[slug]

    # ------------------------------------------------------------------ life cycle
    @asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        """Start each experiment's host, run the loops; flush on exit."""
        self.default.start()
        self.take_up_experiments()
        self.beat()
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
            if self.config.shared:
                await asyncio.to_thread(self.catalog.first.leave_proxy, self.proxy_id)
            for host in self.hosts.values():
                host.stop()
            logger.info("proxy stopped; %d calls written", sum(h.writer.written for h in self.hosts.values()))

    def beat(self) -> None:
        """Beat in the first store and read the live proxies (blocking). A proxy that owns its store (not shared) is
        the only one: no beat."""
        if not self.config.shared:
            return
        self.proxies = self.catalog.first.beat_proxy(self.proxy_id, time.time())

    def call_share(self, host: ExperimentHost) -> Optional[int]:
        """This proxy's part of `host`'s experiment's `max_calls_in_flight` (None: no cap)."""
        job = host.experiment.job
        return proxy_share(job.max_calls_in_flight if job is not None else None, self.proxies, self.proxy_id)

    def admit_waiting(self, host: ExperimentHost) -> None:
        """Let in the waiting calls `host`'s share has room for now (the live proxies change it); say once in the log
        when the share is none: the experiment's cap is below the number of proxies, so this one's calls wait until
        a proxy leaves."""
        share = self.call_share(host)
        if share == 0 and host.slug not in self._no_share:
            logger.warning("experiment %r: max_calls_in_flight is below the %d live proxies: this proxy's share is "
                           "none, its calls wait until a proxy leaves", host.slug, len(self.proxies))  # fmt: skip
        (self._no_share.add if share == 0 else self._no_share.discard)(host.slug)
        host.calls.admit_waiting(share)

    def take_up_experiments(self) -> list[str]:
        """Start a host for each experiment the catalog lists that this proxy does not serve yet; their slugs."""
        with self._taking_up:  # a control call's thread and the housekeeping loop may both find one
            return self._take_up_new()

    def _take_up_new(self) -> list[str]:
        new = self.catalog.not_taken_up(self.hosts)
        for entry in new:
            host = ExperimentHost(entry.slug, self.catalog.open(entry.slug), self.config)
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
                await asyncio.to_thread(self.beat)
                await asyncio.to_thread(self.take_up_experiments)
                for host in list(self.hosts.values()):
                    self.admit_waiting(host)
                    await host.tidy()
            except Exception:  # noqa: BLE001
                logger.exception("housekeeping failed")


def trainer_alone(row: ExperimentRow, timeout_s: float) -> Optional[str]:
    """Why the trainer holding the first store trains one experiment only, while it is alive (its heartbeat within
    `timeout_s`); None when it trains several, or no trainer is there (one that comes refuses at boot)."""
    beat = row.trainer_heartbeat
    return row.trainer_alone if beat is not None and time.time() - beat < timeout_s else None

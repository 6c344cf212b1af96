"""The trainer daemon: one trainer over a swarm's stores, driving each experiment's state machine.

The first store (`--db`) is the default experiment's; each experiment it lists (`ajet_store.Catalog`) has a store of
its own, and the trainer takes each up as it appears: it holds each store (`claim_trainer`), beats in each, and runs
one `ExperimentDriver` per experiment (`driver.py`: the five states, the session, its failures). Every pass ticks
each driver with its update held; of those whose update is then due, the scheduler (`scheduling.py`: least device
time, first come on ties) lets one run. One experiment's update thus never stops another's rollouts, and a
failure stays in its experiment.

What experiments share is this trainer's (`registries.Shared`): LoRA experiments on the embedded backend and engine
attach to one base model and engine per model (`embedded/shared_base.py`); on `--engine vllm` to one launch of vLLM
servers, each experiment its own adapters (`vllm/shared_launches.py`). Where the trainer trains one experiment only
(`factory.trains_alone`: verl, vLLM's sleep mode) a second is refused with the reason, in its store.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from typing import Optional

from ajet.errors import StoreUnavailable
from ajet.types import ExperimentState
from ajet_store import Catalog, Store, redact_url
from ajet_store.placement import DEFAULT_SLUG
from ajet_trainer.driver import ExperimentDriver
from ajet_trainer.experiment_dir import experiment_folder
from ajet_trainer.factory import Shared, preload_embedded, trains_alone
from ajet_trainer.interfaces import TrainingSession
from ajet_trainer.left_servers import end_orphaned_servers
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StoreOutage
from ajet_trainer.scheduling import Candidate, after_update, next_to_train, on_ready

logger = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this host (another user's counts; a zombie, dead but not yet reaped, not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


CATALOG_POLL_S = 1.0
"""How often the trainer reads which experiments the first store lists."""
_WAITING = (ExperimentState.ROLLING, ExperimentState.ROLLING_POST)


class TrainerDaemon:
    """One trainer bound to one swarm's stores; `run(stop)` loops until `stop` is set."""

    def __init__(self, opts: TrainerOptions):
        self.opts = opts
        self.catalog = Catalog(Store(opts.db_url, opts.db_mode, opts.trainer_timeout_s))
        """The swarm's experiments (its first store: the default experiment's, and where the trainer's claim lies)."""
        self.shared = Shared()
        """What the experiments share: base models and engines, vLLM servers (one owner: this trainer)."""
        self.drivers = {DEFAULT_SLUG: self._driver(DEFAULT_SLUG)}
        """Each experiment's driver, by slug: the default's from the start, the others as the catalog lists them."""
        self.candidates: dict[str, Candidate] = {}
        """Each experiment as the scheduler sees it (its device-time clock, whether its update is due)."""
        self.virtual_s = 0.0
        """The scheduler's virtual time: the clock of the experiment it last let update."""
        self._preload: Optional[threading.Thread] = None
        self._listed_at = -CATALOG_POLL_S
        """When the first store's list of experiments was last read (monotonic seconds)."""

    @property
    def store(self) -> Store:
        """The swarm's first store (the one `--db` names, the default experiment's)."""
        return self.catalog.first

    @property
    def session(self) -> Optional[TrainingSession]:
        """The default experiment's session (None while it is torn down)."""
        return self.drivers[DEFAULT_SLUG].session

    def _driver(self, slug: str) -> ExperimentDriver:
        """The driver of experiment `slug`, over its store (the catalog's: `placement.py`), in its folder."""
        opts = replace(self.opts, experiment_dir=experiment_folder(self.opts.experiment_dir, slug))
        beside = slug != DEFAULT_SLUG
        return ExperimentDriver(self.catalog.open(slug), opts, self._imports_ready, beside, self.shared.of(slug))

    def _imports_ready(self) -> None:
        if self._preload is not None:
            self._preload.join()

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        """Hold the stores (`TrainerHolds` when another live trainer does), then drive each experiment until `stop`
        is set; tears down cleanly on exit."""
        self.store.claim_trainer(os.getpid(), pid_alive, trains_alone(self.opts))
        logger.info("trainer watching %s", redact_url(self.opts.db_url))
        beat = threading.Thread(target=self._heartbeat, args=(stop,), name="ajet-trainer-heartbeat", daemon=True)
        beat.start()  # first: a restarting trainer must not look dead while it imports torch or ends a left server
        import torch  # seconds (CI once saw a restart silent for 31 s under load, with torch imported before the beat)

        torch.set_num_threads(max(1, self.opts.threads))
        # import while no job is synced yet: the first boot is seconds faster (`auto` picks embedded on any machine
        # without CUDA, vLLM and verl; where it picks verl, the session module is still the first thing it loads)
        if self.opts.backend in ("embedded", "auto"):
            self._preload = threading.Thread(target=preload_embedded, name="ajet-trainer-preload", daemon=True)
            self._preload.start()
        outage = StoreOutage(self.opts.store_outage_s)
        try:
            end_orphaned_servers()  # vLLM servers a SIGKILLed trainer (of any experiment) left on this machine
            while not stop.is_set():
                try:
                    worked = self.tick()
                except StoreUnavailable as exc:  # the store is away (a database restart): wait for it, bounded
                    outage.wait(exc, stop)
                    continue
                outage.answered()
                if not worked:
                    waiting = any(d.state in _WAITING for d in self.drivers.values())
                    stop.wait(self.opts.rolling_poll_s if waiting else self.opts.poll_s)
        finally:
            stop.set()
            beat.join(10)
            self.teardown(final_checkpoint=True)
            self._say_stopped()
            for driver in self.drivers.values():
                driver.store.close()

    def _say_stopped(self) -> None:
        """Write in each store that this trainer stopped (its engines are withdrawn): begins are refused at once with
        `TrainerStopped` instead of waiting out the heartbeat's timeout. A store that is away keeps the heartbeat's
        verdict."""
        for driver in self.drivers.values():
            try:
                driver.store.release_trainer(os.getpid())
            except Exception:  # noqa: BLE001 - the store may be away at exit: the heartbeat's age says it then
                logger.exception("could not say in the store that the trainer stopped")

    def teardown(self, final_checkpoint: bool) -> None:
        """Close every experiment's session (`ExperimentDriver.teardown`)."""
        for driver in self.drivers.values():
            driver.teardown(final_checkpoint)

    def _heartbeat(self, stop: threading.Event) -> None:
        """Tell the proxies every few seconds that a trainer is alive (even in a long update), in each store."""
        while not stop.is_set():
            for driver in list(self.drivers.values()):
                try:
                    if not driver.store.heartbeat(os.getpid()):
                        logger.error("another trainer took a store over while this one was silent: stopping")
                        stop.set()
                except StoreUnavailable:  # the store is away: the run loop says so once, and waits for it
                    pass
                except Exception:  # noqa: BLE001 - a busy store must not kill the trainer
                    logger.exception("heartbeat failed")
            stop.wait(self.opts.heartbeat_s)

    def tick(self) -> bool:
        """One pass: take up new experiments, tick each driver with its update held, then let the scheduler's pick
        among the due updates run; True if anything did work (poll again at once)."""
        self.take_up_experiments()
        worked, now = False, time.monotonic()
        for key, driver in self.drivers.items():
            worked |= driver.tick(may_update=len(self.drivers) == 1)
            self._mark(key, driver.update_ready, now)
        pick = next_to_train(list(self.candidates.values()))
        if pick is None:
            return worked
        driver = self.drivers[pick.experiment]
        self.virtual_s = pick.clock_s
        driver.tick(may_update=True)
        self.candidates[pick.experiment] = after_update(pick, driver.update_s)
        return True

    def _mark(self, key: str, ready: bool, now: float) -> None:
        """The scheduler's view of experiment `key` after its tick: due (its clock lifted if it lagged) or not."""
        c = self.candidates.get(key) or Candidate(key, self.virtual_s)
        if ready and c.ready_since is None:
            c = on_ready(c, self.virtual_s, now)
        elif not ready:
            c = Candidate(key, c.clock_s)
        self.candidates[key] = c

    def take_up_experiments(self) -> list[str]:
        """A driver for each experiment the catalog lists that this trainer does not drive yet (its store held like
        the first); their slugs."""
        if time.monotonic() - self._listed_at < CATALOG_POLL_S:
            return []
        self._listed_at = time.monotonic()
        new = self.catalog.not_taken_up(self.drivers)
        for entry in new:
            driver = self._driver(entry.slug)
            driver.store.claim_trainer(os.getpid(), pid_alive, trains_alone(self.opts))
            self.drivers[entry.slug] = driver
            logger.info("trainer drives experiment %s", entry.name)
        return [e.slug for e in new]

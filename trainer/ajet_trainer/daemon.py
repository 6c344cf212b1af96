"""The trainer daemon: drives the engine states kept in the store.

OFFLINE -> (a client syncs a job and starts) BOOTING: load the model, restore the last checkpoint,
start the embedded engine, register it -> ROLLING: wait until the job's batch policy is satisfied ->
ROLLING_POST: no new episodes; drain open ones (bounded by `drain_timeout`, then expire them) ->
WEIGHT_SYNCING: assemble samples, GRPO update, new weights live, checkpoint when due, record the step
(marking its episodes consumed in the same transaction) -> ROLLING. With `max_staleness >= 1` (asynchronous
training) the state stays ROLLING: the step runs beside the rollouts (`updating` in the store), on a batch
of episodes at most `max_staleness` policy versions old (older ones are dropped and counted).
`stop_engine` (OFFLINE, from any client, in any state) tears the session down. A trainer that starts while
the store is in another state than OFFLINE is a restart after a crash: it boots, rolls back to its last
checkpoint and goes on.

Failures never leave the engine stuck: a boot that raises (e.g. a checkpoint that does not match the
store) goes back to OFFLINE; an update that raises reboots the session from its last checkpoint, and a
batch that fails `QUARANTINE_AFTER` times in a row is quarantined. Either way the reason is kept in the
store (`last_error`), where `get_engine_status` and the monitor show it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ajet.errors import StoreError, StoreUnavailable, WrongState
from ajet.template_verdict import TemplateVerdict
from ajet.types import ExperimentState
from ajet_store import QUARANTINE_AFTER, Store, redact_url, select_batch, split_stale
from ajet_store.types import BOOT_FAILED, ExperimentRow, PoolEpisode
from ajet_trainer.errors import EngineLost
from ajet_trainer.factory import open_session, preload_embedded
from ajet_trainer.interfaces import TrainingSession
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StoreOutage
from ajet_trainer.step_record import lost_call_metrics, staleness_metrics
from ajet_trainer.template_check import template_verdict, verdict_metrics
from ajet_trainer.types import Metrics

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


HEARTBEAT_S = 2.0
_ACTIVE = (
    ExperimentState.BOOTING,
    ExperimentState.ROLLING,
    ExperimentState.ROLLING_POST,
    ExperimentState.WEIGHT_SYNCING,
)


@dataclass
class _Timers:
    rolling_since: float = field(default_factory=time.monotonic)
    drain_since: float = 0.0
    wait_s: float = 0.0
    drain_s: float = 0.0
    dropped: int = 0
    """Episodes dropped as too old since the last step (asynchronous training, or a synchronous job's leftovers under
    `leftovers: drop`)."""


class TrainerDaemon:
    """One trainer bound to one store; `run(stop)` loops until `stop` is set."""

    def __init__(self, opts: TrainerOptions):
        self.opts = opts
        self.store = Store(opts.db_url, file_mode=opts.db_mode)
        self.session: Optional[TrainingSession] = None
        self.timers = _Timers()
        self._preload: Optional[threading.Thread] = None
        self.template: Metrics = {}
        """The job's rendered-history check (`template_check.verdict_metrics`), carried into every step's metrics."""
        self._pool_seen: Optional[tuple[object, ...]] = None
        """The pool's mark, the policy version and the batch mode when the batch policy last found no batch."""
        self._state = ExperimentState.OFFLINE
        """The experiment's state the last tick saw (a ROLLING trainer polls more often)."""
        self._judged: Optional[tuple[int, str]] = None
        """The run and model the template preflight last ran on (`_judge_template`)."""
        self._verdict: Optional[TemplateVerdict] = None
        """The synced job's preflight, stored or just run: a boot takes its metrics (`template`) from it."""

    # ------------------------------------------------------------------ loop
    def run(self, stop: threading.Event) -> None:
        """Hold the store (`TrainerHolds` when another live trainer does), then drive the state machine until `stop`
        is set; tears down cleanly on exit."""
        self.store.claim_trainer(os.getpid(), pid_alive)
        logger.info("trainer watching %s", redact_url(self.opts.db_url))
        beat = threading.Thread(target=self._heartbeat, args=(stop,), name="ajet-trainer-heartbeat", daemon=True)
        beat.start()
        # import while no job is synced yet: the first boot is seconds faster (`auto` picks embedded on any machine
        # without CUDA, vLLM and verl; where it picks verl, the session module is still the first thing it loads)
        if self.opts.backend in ("embedded", "auto"):
            self._preload = threading.Thread(target=preload_embedded, name="ajet-trainer-preload", daemon=True)
            self._preload.start()
        outage = StoreOutage(self.opts.store_outage_s)
        try:
            while not stop.is_set():
                try:
                    worked = self.tick()
                except StoreUnavailable as exc:  # the store is away (a database restart): wait for it, bounded
                    outage.wait(exc, stop)
                    continue
                outage.answered()
                if not worked:
                    waiting_for_episodes = self._state in (ExperimentState.ROLLING, ExperimentState.ROLLING_POST)
                    stop.wait(self.opts.rolling_poll_s if waiting_for_episodes else self.opts.poll_s)
        finally:
            stop.set()
            beat.join(10)
            self.teardown(final_checkpoint=True)
            self.store.close()

    def _heartbeat(self, stop: threading.Event) -> None:
        """Tell the proxy every few seconds that a trainer is alive (even in a long update)."""
        while not stop.is_set():
            try:
                if not self.store.heartbeat(os.getpid()):
                    logger.error("another trainer took this store over while this one was silent: stopping")
                    stop.set()
            except StoreUnavailable:  # the store is away: the run loop says so once, and waits for it
                pass
            except Exception:  # noqa: BLE001 - a busy store must not kill the trainer
                logger.exception("heartbeat failed")
            stop.wait(HEARTBEAT_S)

    def tick(self) -> bool:
        """One pass of the state machine; True if it did work (poll again at once)."""
        row = self.store.experiment()
        self._state = row.state
        self._judge_template(row)
        if row.state == ExperimentState.OFFLINE or row.job is None:
            if self.session is not None:
                self.teardown(final_checkpoint=True)
            return False
        if self.session is not None and self.session.run_id != row.run_id:
            self.teardown(final_checkpoint=True)  # another job was synced: start over with it
        session = self.session
        try:
            if session is None or row.state == ExperimentState.BOOTING:
                return self._guarded(self.boot, row, self._boot_failed)
            if row.state == ExperimentState.ROLLING and session.job.max_staleness > 0:
                return self._guarded(lambda r: self.async_step(session, r), row, self._update_failed)
            if row.state == ExperimentState.ROLLING:
                return self._guarded(lambda r: self.maybe_close_batch(session, r), row, self._poll_failed)
            if row.state == ExperimentState.ROLLING_POST:
                return self._guarded(lambda _r: self.drain(session), row, self._poll_failed)
            if row.state == ExperimentState.WEIGHT_SYNCING:
                return self._guarded(lambda r: self.train_step(session, r), row, self._update_failed)
        except WrongState as exc:  # a client stopped the engine under our feet
            logger.info("state changed during %s: %s", row.state.value, exc.detail)
        return False

    def _judge_template(self, row: ExperimentRow) -> None:
        """The template preflight of a newly synced job's model, stored for `sync_train_config` to answer (once
        per run: a verdict the store did not take belongs to a job already replaced, whose run comes next)."""
        job = row.job
        if job is not None and row.template_verdict is not None and row.template_verdict.model == job.model:
            self._verdict = row.template_verdict
            return
        if job is None or self._judged == (row.run_id, job.model):
            return
        if self._preload is not None:
            self._preload.join()  # transformers imported from two threads at once can fail (see `boot`)
        verdict = self._verdict = template_verdict(job.model)
        self._judged = (row.run_id, job.model)
        try:
            stored = self.store.set_template_verdict(verdict)
        except StoreError as exc:  # a preflight never stops the trainer: the job still boots without it
            logger.warning("template preflight not stored: %s", exc)
            return
        if stored:
            (logger.info if verdict.merges else logger.warning)("%s", verdict.summary())

    # ------------------------------------------------------------------ failures
    def _guarded(
        self,
        work: Callable[[ExperimentRow], object],
        row: ExperimentRow,
        on_failure: Callable[[ExperimentRow, Exception], None],
    ) -> bool:
        """Run one state's work; a failure leaves the engine in a state clients can use, never stuck.
        Returns whether to poll again at once (the work's own answer when it gives one)."""
        try:
            did = work(row)
        except WrongState:
            raise
        except StoreUnavailable:  # the store is away: the run loop waits for it (`StoreOutage`)
            if on_failure == self._update_failed:  # an update the store did not record: redo it from a checkpoint,
                self.teardown(final_checkpoint=False)  # as after a crash, once the store is back
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: record it where clients see it, recover
            logger.exception("%s failed", row.state.value)
            on_failure(row, exc)
            return False
        return did if isinstance(did, bool) else True

    def _poll_failed(self, row: ExperimentRow, exc: Exception) -> None:
        """Waiting for a batch or for the drain failed (e.g. the store was busy): keep the state, say why,
        try again on the next tick. The session's last engine gone: reboot it (BOOTING launches new engines)."""
        if isinstance(exc, EngineLost):
            self.teardown(final_checkpoint=True)  # the weights are the last step's: checkpoint them
            self.store.record_trainer_error(f"{type(exc).__name__}: {exc}"[:1000], to=ExperimentState.BOOTING)
            return
        try:
            self.store.record_trainer_error(f"{row.state.value}: {type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - the store itself may be what failed
            logger.exception("could not record the error")

    def _boot_failed(self, _row: ExperimentRow, exc: Exception) -> None:
        """A boot that failed will not succeed by itself (a bad model, a checkpoint of another store):
        back to OFFLINE with the reason, so clients stop waiting and see why."""
        self.teardown(final_checkpoint=False)
        self.store.record_trainer_error(f"{BOOT_FAILED}{type(exc).__name__}: {exc}", to=ExperimentState.OFFLINE)

    def _update_failed(self, row: ExperimentRow, exc: Exception) -> None:
        """An update that raised: its weights are suspect, so the session reboots from its last checkpoint
        (BOOTING -> ROLLING); a batch failing `QUARANTINE_AFTER` times in a row is quarantined."""
        batch = self._batch(self.session, row) if self.session is not None else []
        self.teardown(final_checkpoint=False)
        quarantined = self.store.record_update_failure(
            f"update failed: {type(exc).__name__}: {exc}", [p.uuid for p in batch], to=ExperimentState.BOOTING
        )
        if quarantined:
            logger.error("quarantined a batch of %d episode(s) after %d failed updates", len(batch), QUARANTINE_AFTER)

    # ------------------------------------------------------------------ states
    def boot(self, row: ExperimentRow) -> None:
        """Load (or reuse) the session, register the engine, go ROLLING."""
        if self.session is None:
            assert row.job is not None, "boot without a synced job"  # `step` never boots without one
            if self._preload is not None:
                # the imports it runs are the ones the boot needs; importing transformers from two threads at once
                # can fail in its lazy module ("cannot import name 'PreTrainedTokenizer'"), so the boot waits for it
                self._preload.join()
            if row.state != ExperimentState.BOOTING:  # a restart after a crash: no new episodes until we serve
                self.store.transition(ExperimentState.BOOTING, allowed_from=_ACTIVE)
            self.session = open_session(row.job, row.run_id, self.store, self.opts)
            verdict = self._verdict if self._verdict is not None and self._verdict.model == row.job.model else None
            self.template = verdict_metrics(verdict)
        s = self.session
        self.store.remove_engines()
        s.register()
        self.store.transition(ExperimentState.ROLLING, allowed_from=_ACTIVE)
        self.timers = _Timers()
        logger.info("ROLLING: policy v%d served at %s", s.policy_version, s.base_url)

    def _batch(self, session: TrainingSession, row: ExperimentRow) -> list[PoolEpisode]:
        """The next step's episodes under the batch policy ([] if not ready). Asynchronous training first drops
        (for good, counted) the pool's episodes more than `max_staleness` versions behind the policy."""
        job = session.job
        seen = (*self.store.pool_mark(), session.policy_version, row.batch_mode)
        if seen == self._pool_seen:  # nothing ended, was consumed or dropped since the last look: still no batch
            return []
        pool = self.store.pool_episodes()
        if job.max_staleness > 0:
            pool, stale = split_stale(pool, session.policy_version, job.max_staleness)
            why = f"older than max_staleness={job.max_staleness} at policy v{session.policy_version}"
        elif job.leftovers == "drop":
            pool, stale = split_stale(pool, session.policy_version, 0)
            why = f"a leftover of an older policy at policy v{session.policy_version} (leftovers: drop)"
        else:
            stale = []
        if stale:
            self.timers.dropped += self.store.drop_stale([p.uuid for p in stale], why)
        batch = select_batch(pool, row.batch_mode, job.batch_size, job.num_repeat, job.mission_mix)
        self._pool_seen = None if batch or stale or job.max_staleness > 0 else seen
        return batch

    def async_step(self, session: TrainingSession, row: ExperimentRow) -> bool:
        """ROLLING with `max_staleness >= 1`: once the batch policy is satisfied, train on the batch while
        rollouts go on (the store says `updating`); the state stays ROLLING throughout."""
        batch = self._batch(session, row)
        if not batch:
            return False
        timers = {
            **self.template,
            "wait_s": time.monotonic() - self.timers.rolling_since,
            "drain_s": 0.0,
            **staleness_metrics(batch, session.policy_version, self.timers.dropped),
            **self._lost_calls(),
        }
        self.store.set_updating(True)
        try:
            session.train(batch, timers)
        finally:
            self.store.set_updating(False)
            self.timers = _Timers()  # the next step's wait starts when this one ends: step_s is the period
        self._retention(session)
        return True

    def _lost_calls(self) -> Metrics:
        """The step's count of episodes made untrainable by a lost call (`steps.lost_call_metrics`)."""
        last = self.store.steps(last=1)
        return lost_call_metrics(self.store.totals()["lost_call"], last[-1].metrics if last else None)

    def _retention(self, session: TrainingSession) -> None:
        if session.job.keep_call_bodies_steps is not None:
            pruned = self.store.prune_bodies(session.job.keep_call_bodies_steps)
            logger.info("retention: pruned the bodies of %d call(s)", pruned)

    def maybe_close_batch(self, session: TrainingSession, row: ExperimentRow) -> bool:
        """ROLLING -> ROLLING_POST once the batch policy is satisfied (an engine that exited meanwhile withdrawn)."""
        session.check_engines()
        if not self._batch(session, row):
            return False
        self.store.transition(ExperimentState.ROLLING_POST, allowed_from=[ExperimentState.ROLLING])
        now = time.monotonic()
        self.timers.wait_s, self.timers.drain_since = now - self.timers.rolling_since, now
        return True

    def drain(self, session: TrainingSession) -> bool:
        """ROLLING_POST -> WEIGHT_SYNCING once no train episode of the run is open (or the drain timeout passed,
        which expires them); at once with partial rollouts. Eval episodes never hold a step: they go on, served by
        whichever policy is live."""
        if self.timers.drain_since == 0.0:  # a restart found the engine in ROLLING_POST
            self.timers.drain_since = time.monotonic()
        waited = time.monotonic() - self.timers.drain_since
        # partial rollouts: open episodes go on into a later batch, their answers across the update
        holding = set() if session.job.partial_rollouts else self.store.open_uuids(trainable=True)
        if holding and waited < session.job.drain_timeout:
            return False
        expired = self.store.expire_episodes(holding) if holding else []
        if expired:
            logger.warning("drain timeout: expired %d open episode(s)", len(expired))
        self.store.transition(ExperimentState.WEIGHT_SYNCING, allowed_from=[ExperimentState.ROLLING_POST])
        self.timers.drain_s = time.monotonic() - self.timers.drain_since
        return True

    def train_step(self, session: TrainingSession, row: ExperimentRow) -> None:
        """WEIGHT_SYNCING: one GRPO step on the batch, then back to ROLLING."""
        batch = self._batch(session, row)
        if batch:
            session.train(
                batch,
                {
                    **self.template,
                    "wait_s": self.timers.wait_s,
                    "drain_s": self.timers.drain_s,
                    **staleness_metrics(batch, session.policy_version, self.timers.dropped),
                    **self._lost_calls(),
                },
            )
            self._retention(session)
        # recording the step already resumed ROLLING (`Store.record_step`); an empty batch recorded none
        self.store.transition(
            ExperimentState.ROLLING, allowed_from=[ExperimentState.WEIGHT_SYNCING, ExperimentState.ROLLING]
        )
        self.timers = _Timers()

    def teardown(self, final_checkpoint: bool) -> None:
        """Stop the engine, unregister it, save a last checkpoint."""
        if self.session is None:
            return
        s = self.session
        try:
            s.close(final_checkpoint=final_checkpoint)
        finally:
            self.session = None  # only once the last checkpoint is written: `session is None` means torn down
        try:
            self.store.remove_engines([e.name for e in s.registered()])
        except Exception:  # noqa: BLE001 - the store may be gone at interpreter exit
            logger.exception("could not unregister the session's engines")
        logger.info("session closed at step %d", s.step)

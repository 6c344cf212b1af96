"""One experiment's state machine, driven by the trainer over the experiment's store.

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

Failures never leave the experiment stuck: a boot that raises (e.g. a checkpoint that does not match the
store) goes back to OFFLINE; an update that raises reboots the session from its last checkpoint, and a
batch that fails `QUARANTINE_AFTER` times in a row is quarantined. Either way the reason is kept in the
store (`last_error`), where `get_engine_status` and the monitor show it. Each experiment has its own driver, so
a failure stays in its experiment.

An update is where the device's time goes: with several experiments the trainer decides whose runs next
(`daemon.py`, by `scheduling.py`'s rule); a driver told to hold its update says it is ready (`update_ready`) and
waits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ajet.errors import StoreError, StoreUnavailable, WrongState
from ajet.template_verdict import TemplateVerdict
from ajet.types import ExperimentState
from ajet_store import QUARANTINE_AFTER, Store, select_batch, split_stale
from ajet_store.replay import ReplayImport
from ajet_store.types import BOOT_FAILED, ExperimentRow, PoolEpisode
from ajet_trainer.errors import EngineLost, TrainerError
from ajet_trainer.factory import Shared, open_session, trains_alone
from ajet_trainer.interfaces import TrainingSession
from ajet_trainer.options import TrainerOptions
from ajet_trainer.outage import StepNotRecorded
from ajet_trainer.replay_source import open_replay
from ajet_trainer.step_record import lost_call_metrics, staleness_metrics
from ajet_trainer.template_check import template_verdict, verdict_metrics
from ajet_trainer.types import Metrics

logger = logging.getLogger(__name__)

ONE_EXPERIMENT = "a second experiment cannot train on this swarm: "
"""What a second experiment's boot fails with where the trainer trains one only (`trains_alone` says why). A sync
is refused first where the trainer said so when it claimed the store (`ajet.sharing.beside_conflict`)."""

REPLAY_PAGE = 256
"""Stored episodes a replay job looks at per tick (whole groups): the import goes on between the ticks that train."""

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


class ExperimentDriver:
    """One experiment's state machine over its store, and the session that trains it."""

    def __init__(
        self,
        store: Store,
        opts: TrainerOptions,
        imports_ready: Callable[[], None] = lambda: None,
        beside: bool = False,
        shared: Optional[Shared] = None,
    ):
        self.store = store
        self.beside = beside
        """An experiment beside the default: it boots only where several experiments can train (`trains_alone`)."""
        self.shared = shared
        """The trainer's registries of what experiments share, for this experiment (`engines.Shared`)."""
        self.opts = opts
        self.imports_ready = imports_ready
        """Returns once the trainer's preloading imports are done (importing transformers from two threads at once
        can fail in its lazy module: "cannot import name 'PreTrainedTokenizer'")."""
        self.session: Optional[TrainingSession] = None
        self.timers = _Timers()
        self.template: Metrics = {}
        """The job's rendered-history check (`template_check.verdict_metrics`), carried into every step's metrics."""
        self._pool_seen: Optional[tuple[object, ...]] = None
        """The pool's mark, the policy version and the batch mode when the batch policy last found no batch."""
        self.state = ExperimentState.OFFLINE
        """The experiment's state the last tick saw (a ROLLING trainer polls more often)."""
        self._judged: Optional[tuple[int, str]] = None
        """The run and model the template preflight last ran on (`_judge_template`)."""
        self._verdict: Optional[TemplateVerdict] = None
        """The synced job's preflight, stored or just run: a boot takes its metrics (`template`) from it."""
        self.update_ready = False
        """The last tick found an update to run and was told to hold it (`tick(may_update=False)`)."""
        self.update_s = 0.0
        """Seconds the last update took (what the scheduler charges the experiment)."""
        self.replay: Optional[tuple[int, ReplayImport]] = None
        """A replay job's import of its source's episodes, and the run it belongs to (`import_replay`)."""

    def tick(self, may_update: bool = True) -> bool:
        """One pass of the state machine; True if it did work (poll again at once). With `may_update` False an
        update that is due is held (`update_ready` says so) for the trainer to schedule."""
        row = self.store.experiment()
        self.state, self.update_ready, self.update_s = row.state, False, 0.0
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
                return self._guarded(lambda r: self.async_step(session, r, may_update), row, self._update_failed)
            if row.state == ExperimentState.ROLLING:
                copied = self._guarded(lambda _r: self.import_replay(session), row, self._poll_failed)
                return self._guarded(lambda r: self.maybe_close_batch(session, r), row, self._poll_failed) or copied
            if row.state == ExperimentState.ROLLING_POST:
                return self._guarded(lambda _r: self.drain(session), row, self._poll_failed)
            if row.state == ExperimentState.WEIGHT_SYNCING and not may_update:
                self.update_ready = True
            elif row.state == ExperimentState.WEIGHT_SYNCING:
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
        self.imports_ready()
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
        except StepNotRecorded as exc:
            # the store stayed away past an update: the step is kept in a checkpoint that carries its record (or is
            # lost: the message says which); the session reboots from the checkpoint once the store is back
            logger.error("%s", exc)
            self.teardown(final_checkpoint=exc.kept)
            raise exc.cause from exc
        except StoreUnavailable:
            # away before anything moved ahead of it (an update waits out its own writes, the model kept): the run
            # loop waits for it (`StoreOutage`)
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
            alone = trains_alone(self.opts) if self.beside else None
            if alone is not None:
                raise TrainerError(ONE_EXPERIMENT + alone)
            self.imports_ready()  # the preload's imports are the ones the boot needs
            if row.state != ExperimentState.BOOTING:  # a restart after a crash: no new episodes until we serve
                self.store.transition(ExperimentState.BOOTING, allowed_from=_ACTIVE)
            self.session = open_session(row.job, row.run_id, self.store, self.opts, self.shared)
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

    def async_step(self, session: TrainingSession, row: ExperimentRow, may_update: bool = True) -> bool:
        """ROLLING with `max_staleness >= 1`: once the batch policy is satisfied, train on the batch while
        rollouts go on (the store says `updating`); the state stays ROLLING throughout."""
        batch = self._batch(session, row)
        if not batch or not may_update:
            self.update_ready = bool(batch)
            return False
        timers = {
            **self.template,
            "wait_s": time.monotonic() - self.timers.rolling_since,
            "drain_s": 0.0,
            **staleness_metrics(batch, session.policy_version, self.timers.dropped),
            **self._lost_calls(),
        }
        self.store.set_updating(True)
        t0 = time.monotonic()
        try:
            session.train(batch, timers)
        finally:
            self.update_s = time.monotonic() - t0
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

    def import_replay(self, session: TrainingSession) -> bool:
        """A replay job: copy the next page of its source's groups into the store (`ajet_store.replay`); whether
        any was copied. The import is the session's: another run opens another."""
        if session.job.replay is None:
            return False
        if self.replay is None or self.replay[0] != session.run_id:
            self.replay = (session.run_id, open_replay(session.job, self.opts, self.store))
        work = self.replay[1]
        if work.done:
            return False
        copied = work.step(REPLAY_PAGE)
        if work.done:
            work.source.close()
            logger.info("replay: %d episode(s) of %s copied (%d without calls left out)", work.copied,
                        work.source_name, work.without_calls)  # fmt: skip
        return copied > 0

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
        t0 = time.monotonic()
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
        self.update_s = time.monotonic() - t0
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

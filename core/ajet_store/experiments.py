"""The experiment's row: state transitions, the synced job, the batch mode and the trainer's heartbeat."""

from __future__ import annotations

import socket
import time
from typing import Any, Callable, Iterable, Optional, Sequence

import sqlalchemy as sa

from ajet.errors import WrongState
from ajet.job import AgentJetJob
from ajet.template_verdict import TemplateVerdict
from ajet.types import BatchMode, EpisodeStatus, ExperimentState
from ajet_store import counters, rows
from ajet_store import tables as t
from ajet_store.db import Database, retried
from ajet_store.errors import TrainerHolds
from ajet_store.types import ExperimentRow

QUARANTINE_AFTER = 2
"""Failed updates of one batch in a row before its episodes are quarantined (never trained)."""


class ExperimentOps(Database):
    """What proxy and trainer read and change of the experiment's row."""

    def experiment(self) -> ExperimentRow:
        """The experiment's row."""
        with self._read() as c:
            return rows.experiment(c)

    @retried
    def transition(
        self, to: ExperimentState, allowed_from: Optional[Iterable[ExperimentState]] = None
    ) -> ExperimentRow:
        """Move to `to` if the current state is in `allowed_from` (any state when None; else `WrongState`).

        Moving to OFFLINE aborts every open episode (their keys stop working). Any state but ROLLING ends an
        asynchronous update (`updating_since`): a trainer that reboots or stops is no longer updating.
        """
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            if allowed_from is not None and cur.state not in set(allowed_from):
                raise WrongState(f"cannot go to {to.value} from {cur.state.value}", state=cur.state.value)
            now = time.time()
            if cur.state != to:
                c.execute(t.experiments.update().values(state=to.value, state_since=now))
            if to != ExperimentState.ROLLING and cur.updating_since is not None:
                c.execute(t.experiments.update().values(updating_since=None))
            if to == ExperimentState.OFFLINE:
                is_open = t.episodes.c.status == EpisodeStatus.OPEN.value
                counters.bulk_move(c, is_open, EpisodeStatus.ABORTED.value)
                c.execute(t.episodes.update().where(is_open).values(status=EpisodeStatus.ABORTED.value, ended_at=now))
            return rows.experiment(c)

    @retried
    def set_updating(self, updating: bool) -> None:
        """Say that an asynchronous update started (True) or ended (False); rollouts go on meanwhile."""
        with self._tx() as c:
            c.execute(t.experiments.update().values(updating_since=time.time() if updating else None))

    @retried
    def heartbeat(self, pid: Optional[int] = None) -> bool:
        """The trainer's sign of life (written every few seconds by the trainer daemon); with `pid`, only while that
        trainer still holds the store (False: another took it over, after this one was silent past the timeout)."""
        with self._tx() as c:
            q = t.experiments.update().values(trainer_heartbeat=time.time(), trainer_stopped_at=None)
            if pid is not None:
                q = q.where(t.experiments.c.trainer_pid == pid, t.experiments.c.trainer_host == socket.gethostname())
            return c.execute(q).rowcount > 0

    @retried
    def claim_trainer(self, pid: int, alive: Callable[[int], bool], alone: Optional[str] = None) -> None:
        """Hold the store for the trainer `pid` of this host: `TrainerHolds` naming the holder when another trainer
        beat within the store's `trainer_timeout_s` and is not a process of this host that is gone (`alive`: a pid
        check). `alone`: why this trainer trains one experiment only (None: it can train several)."""
        host = socket.gethostname()
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            age = None if cur.trainer_heartbeat is None else time.time() - cur.trainer_heartbeat
            mine = cur.trainer_host == host and cur.trainer_pid == pid
            gone = cur.trainer_host == host and cur.trainer_pid is not None and not alive(cur.trainer_pid)
            if cur.trainer_pid is not None and age is not None and age < self.trainer_timeout_s and not (mine or gone):
                raise TrainerHolds(
                    f"another trainer holds this store: host {cur.trainer_host}, pid {cur.trainer_pid}, heartbeat "
                    f"{age:.0f}s ago; stop it first (or start this one {self.trainer_timeout_s:.0f}s after it stopped)"
                )
            now = time.time()
            c.execute(
                t.experiments.update().values(
                    trainer_host=host,
                    trainer_pid=pid,
                    trainer_heartbeat=now,
                    trainer_alone=alone,
                    trainer_stopped_at=None,
                )
            )

    @retried
    def release_trainer(self, pid: int) -> bool:
        """Say that the trainer `pid` of this host stopped cleanly (its engines withdrawn): begins are refused at once
        with `TrainerStopped` until a trainer claims the store again. False when it no longer held the store."""
        host = socket.gethostname()
        with self._tx() as c:
            q = t.experiments.update().where(t.experiments.c.trainer_pid == pid, t.experiments.c.trainer_host == host)
            return c.execute(q.values(trainer_stopped_at=time.time())).rowcount > 0

    @retried
    def set_template_verdict(self, verdict: TemplateVerdict) -> bool:
        """Store the trainer's template preflight, if the synced job is still of its model (False: another job was
        synced meanwhile, and its own preflight follows)."""
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            if cur.job is None or cur.job.model != verdict.model:
                return False
            c.execute(t.experiments.update().values(template_verdict=verdict.model_dump(mode="json")))
            return True

    @retried
    def probe_write(self) -> None:
        """Write one small row, as a heartbeat does (`StoreWriteFailed` if the store takes no writes): tells a
        trainer that is down from a store that refuses the trainer's heartbeat (a full disk)."""
        with self._tx() as c:
            done = c.execute(t.meta.update().where(t.meta.c.key == "write_probe").values(value=repr(time.time())))
            if done.rowcount == 0:
                c.execute(t.meta.insert().values(key="write_probe", value=repr(time.time())))

    @retried
    def record_trainer_error(self, message: str, to: Optional[ExperimentState] = None) -> ExperimentRow:
        """Keep the trainer's failure where clients see it (`last_error`); optionally move to `to`."""
        with self._tx() as c:
            now = time.time()
            values: dict[str, Any] = {"last_error": message[:1024], "last_error_at": now}
            if to is not None and rows.experiment(c).state != to:
                values.update(state=to.value, state_since=now)
            c.execute(t.experiments.update().values(**values))
            return rows.experiment(c)

    @retried
    def record_update_failure(self, message: str, batch_uuids: Sequence[str], to: ExperimentState) -> bool:
        """Count a failed update of this batch; at the `QUARANTINE_AFTER`-th failure in a row, mark its
        episodes untrainable ("quarantined") so it is never tried again. Moves to `to`; True if quarantined."""
        e = t.episodes.c
        with self._tx() as c:
            failures = rows.locked_experiment(c).update_failures + 1
            quarantine = failures >= QUARANTINE_AFTER
            if quarantine and batch_uuids:
                c.execute(
                    t.episodes.update()
                    .where(e.uuid.in_(list(batch_uuids)), e.consumed_step.is_(None))
                    .values(
                        untrainable=True,
                        untrainable_reason=f"quarantined: the update failed {failures} times: {message}"[:256],
                    )
                )
            now = time.time()
            c.execute(
                t.experiments.update().values(
                    last_error=message[:1024],
                    last_error_at=now,
                    update_failures=0 if quarantine else failures,
                    state=to.value,
                    state_since=now,
                )
            )
            return quarantine

    @retried
    def sync_job(self, job: AgentJetJob) -> ExperimentRow:
        """Store the job (only while OFFLINE); its collection method becomes the batch mode.

        A job that differs from the stored one starts a new run: episodes rewarded under the old job
        stay in the store but leave the rollout pool. Re-syncing the same job keeps the pool (resume).
        """
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            if cur.state != ExperimentState.OFFLINE:
                raise WrongState(
                    f"config sync only in OFFLINE; the experiment is {cur.state.value}", state=cur.state.value
                )
            _write_job(c, cur, job)
            return rows.experiment(c)

    @retried
    def sync_and_start(self, job: AgentJetJob) -> tuple[ExperimentRow, bool]:
        """Atomically: if OFFLINE, store the job and go BOOTING; else leave the running job alone.

        Returns (row, started). Two clients racing to start the same swarm cannot both sync.
        """
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            if cur.state != ExperimentState.OFFLINE:
                return cur, False
            _write_job(c, cur, job)
            _boot(c)
            return rows.experiment(c), True

    @retried
    def start(self) -> ExperimentRow:
        """OFFLINE -> BOOTING for the synced job (`WrongState` without one, or from another state)."""
        with self._tx() as c:
            cur = rows.locked_experiment(c)
            if cur.job is None:
                raise WrongState("no job synced; call sync_train_config first", state=cur.state.value)
            if cur.state != ExperimentState.OFFLINE:
                raise WrongState(
                    f"cannot go to {ExperimentState.BOOTING.value} from {cur.state.value}", state=cur.state.value
                )
            _boot(c)
            return rows.experiment(c)

    @retried
    def set_batch_mode(self, mode: BatchMode) -> ExperimentRow:
        """Change the batch policy (applies to the next step)."""
        with self._tx() as c:
            c.execute(t.experiments.update().values(batch_mode=mode.value))
            return rows.experiment(c)


def _boot(c: sa.Connection) -> None:
    """Go BOOTING for a (re)start: the last trainer error belongs to the run before it."""
    c.execute(
        t.experiments.update().values(
            state=ExperimentState.BOOTING.value, state_since=time.time(), last_error=None, last_error_at=None
        )
    )


def _write_job(c: sa.Connection, cur: ExperimentRow, job: AgentJetJob) -> None:
    run_id = cur.run_id + (1 if cur.job != job else 0)
    mode = job.swarm_mode_sample_collection_method
    values: dict[str, object] = {"job": job.to_wire(), "batch_mode": mode.value, "run_id": run_id}
    if cur.template_verdict is not None and cur.template_verdict.model != job.model:
        values["template_verdict"] = None  # the trainer's preflight of the new model replaces it
    c.execute(t.experiments.update().values(**values))

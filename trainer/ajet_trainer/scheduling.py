"""Which experiment trains next when several share one trainer: fair by device time, first come on ties.

Each experiment carries a virtual clock of the device seconds its updates took. Of the experiments whose batch is
ready, the one with the least wins; on a tie, the one whose batch has waited longest; then by name. The scheduler
also keeps a virtual time, the clock of the experiment it last picked when it picked it (it never goes back). An
experiment whose batch becomes ready has its clock lifted to the virtual time if it lags it (`on_ready`): it joined
late, or its clients paused, and it gets no burst to catch up on the time it was away.

Why none is starved: every ready clock is at least the virtual time, and at most one update past it (an
experiment is picked at the virtual time and its update moves it on), so while an experiment's batch waits, each
other experiment is given at most one of its own updates plus the longest update's device time, whatever the
updates cost (tests/trainer/test_scheduling.py simulates it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence


@dataclass(frozen=True)
class Candidate:
    """One experiment as the scheduler sees it."""

    experiment: str
    """Its name (`project/experiment`)."""
    clock_s: float
    """Its clock: the device seconds its updates took, lifted where it lagged the virtual time (`on_ready`)."""
    ready_since: Optional[float] = None
    """When its next batch became ready (monotonic seconds); None: not ready."""


def on_ready(candidate: Candidate, virtual_s: float, now: float) -> Candidate:
    """`candidate` once its batch is ready at `now`: its clock lifted to the virtual time `virtual_s` if it lags it
    (time away is not owed to it)."""
    return replace(candidate, clock_s=max(candidate.clock_s, virtual_s), ready_since=now)


def next_to_train(candidates: Sequence[Candidate]) -> Optional[Candidate]:
    """The ready experiment with the least clock (ties: the longest-waiting batch, then the name); None if none is
    ready. Its clock is the scheduler's new virtual time."""
    ready = [c for c in candidates if c.ready_since is not None]
    if not ready:
        return None
    return min(ready, key=lambda c: (c.clock_s, c.ready_since, c.experiment))


def after_update(candidate: Candidate, device_s: float) -> Candidate:
    """The experiment after an update that took `device_s` seconds of the device: its clock moved on, its batch
    consumed (not ready until the next one is)."""
    return replace(candidate, clock_s=candidate.clock_s + device_s, ready_since=None)

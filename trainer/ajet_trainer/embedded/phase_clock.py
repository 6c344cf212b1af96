"""The embedded engine's clock of where its sampling goes (prefill, decode, constraints, drawing tokens): running
totals that the step metrics report as differences (`ajet_trainer.types.PhaseTimes`)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import fields
from typing import Iterator

from ajet_trainer.types import PhaseTimes


class PhaseClock:
    """Totals added to by the batcher's one worker thread; a reading from another thread may be a phase behind,
    never torn (each total is replaced whole)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {f.name: 0 for f in fields(PhaseTimes)}

    @contextmanager
    def timed(self, seconds: str, **counts: int) -> Iterator[None]:
        """Add the block's wall seconds to total `seconds`, and `counts` to theirs (torch on CPU runs each op to its
        end before it returns, so a forward's wall time is its compute)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(seconds, time.perf_counter() - t0, **counts)

    def add(self, seconds: str, spent: float, **counts: int) -> None:
        self.totals[seconds] += spent
        for name, n in counts.items():
            self.totals[name] += n

    def reading(self) -> PhaseTimes:
        """The totals now."""
        t = dict(self.totals)
        return PhaseTimes(
            prefill_s=t["prefill_s"], prefill_tokens=int(t["prefill_tokens"]), decode_s=t["decode_s"],
            decode_steps=int(t["decode_steps"]), decode_tokens=int(t["decode_tokens"]), constrain_s=t["constrain_s"],
            sample_s=t["sample_s"],
        )  # fmt: skip

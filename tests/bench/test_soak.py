"""The long soak, ten minutes of it (`bench/soak.py`; its hours are the bench's rows): two experiments on one swarm
under steady client load, then the swarm at rest holds no descriptor of a deleted file and no socket its peer closed,
and once stopped it leaves nothing in the temporary folder its processes were given. Only what cannot be noise is
asserted: the slopes of ten minutes are the bench's to report, not a test's to judge. The soak runs beside the other
tests (`tests/support/soak_run.py`: started first, this file dealt last)."""

from __future__ import annotations

import pytest

from tests.support import soak_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def test_ten_minutes_of_load_leave_nothing_behind():
    row = soak_run.row()
    assert row["calls"] > 100, row  # the clients played all along (a stalled swarm leaves little to leak)
    assert row["deleted_files"] == [], row["deleted_files"]
    assert row["close_wait"] == [], row["close_wait"]
    assert row["tmp_left"] == [], row["tmp_left"]

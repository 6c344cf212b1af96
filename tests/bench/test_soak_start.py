"""Starts `make test`'s ten-minute soak in the background (`tests/support/soak_run.py`): tests/conftest.py deals this
file first, and tests/bench/test_soak.py, which waits for the soak's row, last."""

from __future__ import annotations

import pytest

from tests.support import soak_run

pytestmark = pytest.mark.slow


def test_the_soak_starts_beside_the_other_tests():
    soak_run.start()
    assert (soak_run.folder() / "pid").is_file()

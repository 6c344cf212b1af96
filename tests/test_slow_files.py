"""The order the suite deals its files to the workers (`tests/slow_files.txt`, read by `tests/conftest.py`) and the
helper that refreshes it from a `--durations=0` report (`tests/support/slow_files.py`)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_file_the_suite_deals_first_exists():
    from tests.conftest import slow_files

    listed = slow_files()
    assert listed and len(set(listed)) == len(listed)
    assert [p for p in listed if not (REPO / p).is_file()] == []


def test_a_durations_report_is_summed_per_file():
    from tests.support.slow_files import per_file

    report = """
12.50s call     tests/e2e/test_a.py::test_one
0.50s setup    tests/e2e/test_a.py::test_one
3.00s call     tests/proxy/test_b.py::test_two[x]
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
"""
    assert per_file(report) == {"tests/e2e/test_a.py": 13.0, "tests/proxy/test_b.py": 3.0}


def test_the_background_soak_is_started_first_and_waited_for_last():
    from tests.conftest import FIRST, LAST, deal_ranks, slow_files

    rank, slow = deal_ranks(), next(p for p in slow_files() if p not in (FIRST, LAST))
    files = [LAST, "tests/unlisted_test.py", slow, FIRST]
    dealt = sorted(files, key=lambda path: rank.get(path, len(slow_files())))
    assert dealt == [FIRST, slow, "tests/unlisted_test.py", LAST]

"""Thread executors: bounded submit, periodic drain, bounded and logged retries."""

import logging
import threading
import time

from ajet import BoundedThreadPoolExecutor, PeriodicDrainThreadPoolExecutor, run_episodes_until_all_complete


def test_bounded_submit_blocks_when_full():
    gate = threading.Event()
    pool = BoundedThreadPoolExecutor(max_workers=2)
    pool.submit(gate.wait)
    pool.submit(gate.wait)
    t0 = time.monotonic()
    threading.Timer(0.3, gate.set).start()
    pool.submit(lambda: None)  # must wait for a slot
    assert time.monotonic() - t0 >= 0.25
    pool.shutdown(wait=True)


def test_periodic_drain_waits_for_each_group():
    running, peak, lock = [0], [0], threading.Lock()

    def work(_task):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    ex = PeriodicDrainThreadPoolExecutor(workers=4, max_parallel=8)
    for i in range(12):
        ex.submit_with_periodic_drain(work, i)
        if (i + 1) % 4 == 0:
            assert running[0] == 0  # drained after every 4th submission
    ex.shutdown()
    assert peak[0] <= 4


def test_retries_are_bounded_and_logged(caplog, monkeypatch):
    monkeypatch.setattr("ajet.utils.thread_executors.RETRY_BACKOFF_S", (0.001, 0.001))
    attempts = {}

    def flaky(task):
        attempts[task] = attempts.get(task, 0) + 1
        if task == "never" or attempts[task] < 2:
            raise RuntimeError(f"boom {task}")
        return task.upper()

    with caplog.at_level(logging.WARNING):
        out = run_episodes_until_all_complete(["a", "never"], flaky, max_workers=2, auto_retry=True, max_retries=3)
    assert out == ["A", None]
    assert attempts == {"a": 2, "never": 4}
    assert any("failed after 4 attempt" in r.message for r in caplog.records)
    assert sum("retry" in r.message for r in caplog.records) == 1 + 3
    assert all(r.exc_info is not None for r in caplog.records)  # each failure with its traceback


def test_auto_retry_retries_until_every_episode_completes(monkeypatch):
    monkeypatch.setattr("ajet.utils.thread_executors.RETRY_BACKOFF_S", (0.001, 0.001))
    attempts = {}

    def fails_five_times(task):
        attempts[task] = attempts.get(task, 0) + 1
        if attempts[task] <= 5:
            raise ConnectionError("the server is restarting")
        return task * 10

    assert run_episodes_until_all_complete([3, 1, 2], fails_five_times, auto_retry=True) == [30, 10, 20]
    assert attempts == {1: 6, 2: 6, 3: 6}


def test_max_workers_defaults_to_one_thread_per_task():
    barrier = threading.Barrier(6, timeout=5)  # only passes if all six run at once
    assert run_episodes_until_all_complete(range(6), lambda t: barrier.wait() * 0 + t) == list(range(6))


def test_no_retry_without_auto_retry():
    calls = []
    out = run_episodes_until_all_complete([1], lambda t: calls.append(t) or 1 / 0, auto_retry=False)
    assert out == [None] and calls == [1]

"""`ajet-proxy plot`: a PNG of the run's curves from the store, with what each step recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ajet.stat_types import StepInfo
from ajet_proxy.plot import series
from ajet_store import Store, sqlite_url
from tests.support.procs import offline_env

BIN = Path(sys.executable).parent


def test_series_skip_what_a_step_did_not_record():
    steps = [
        StepInfo(step=1, policy_version=1, num_episodes=4, reward_mean=0.25, metrics={"entropy": 2.0}, finished_at=1.0),
        StepInfo(step=2, policy_version=2, num_episodes=4, reward_mean=0.5, metrics={}, finished_at=2.0),
        StepInfo(
            step=3,
            policy_version=3,
            num_episodes=8,
            reward_mean=None,
            metrics={"entropy": 1.5, "flag": True},
            finished_at=3.0,
        ),
    ]
    assert series(steps, "reward_mean") == ([1, 2], [0.25, 0.5])
    assert series(steps, "entropy") == ([1, 3], [2.0, 1.5])
    assert series(steps, "num_episodes") == ([1, 2, 3], [4.0, 4.0, 8.0])
    assert series(steps, "flag") == ([], [])


def test_plot_command_writes_a_png(tmp_path):
    url = sqlite_url(tmp_path / "s.db")
    with Store(url) as st:
        for step in range(1, 31):
            st.record_step(step, step, [], step / 30, {"entropy": 3 - step / 15, "logprob_gap": 1e-3})
    out = tmp_path / "reward.png"
    res = subprocess.run(
        [str(BIN / "ajet-proxy"), "plot", "--db", url, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    assert res.returncode == 0 and "plotted 30 steps" in res.stdout, res.stderr
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width > 600 and height > 600


def test_plot_of_an_empty_store_is_one_line(tmp_path):
    url = sqlite_url(tmp_path / "empty.db")
    Store(url).close()
    res = subprocess.run(
        [str(BIN / "ajet-proxy"), "plot", "--db", url, "--out", str(tmp_path / "r.png")],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(),
    )
    assert (
        res.returncode == 1
        and res.stderr.strip() == "ajet-proxy: error: the store has no training step yet: nothing to plot"
    )

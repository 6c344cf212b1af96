"""The tests' update delay (`tests.support.faults`) reaches a trainer process only through its environment: the
learner's update sleeps first there, and nowhere else; importing the proxy is untouched."""

import subprocess
import sys

from tests.support.faults import update_delay_env
from tests.support.procs import REPO, offline_env

PROBE = (
    "import sys, time, ajet_proxy.cli\n"
    "assert 'ajet_trainer.embedded.learner' not in sys.modules  # nothing imported early\n"
    "from ajet_trainer.embedded.learner import Learner\n"
    "t0 = time.monotonic()\n"
    "try:\n"
    "    Learner.update(None, [])\n"
    "except Exception:\n"
    "    pass\n"
    "print(Learner.update.__name__, round(time.monotonic() - t0, 1))\n"
)


def _probe(**env: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=offline_env(**env))  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split()


def test_the_delay_wraps_the_update_only_where_the_environment_asks():
    name, seconds = _probe(**update_delay_env(1.5))
    assert name == "slow_update" and float(seconds) >= 1.5
    name, seconds = _probe()
    assert name == "update" and float(seconds) < 1.0

"""The CPU an embedded trainer spends importing before it can serve, this tree against a baseline commit's, side by
side in one run.

    python -m bench.trainer_import --baseline REF [--rounds 5]

Each tree (this checkout, and `REF` checked out in a temporary git worktree) imports, in a fresh process each:
- `serve`: what `ajet-trainer start` imports before its engine serves (`ajet_trainer.embedded.session`);
- `train`: that and verl's algorithms, which the first update needs (`ajet_trainer.grpo.core_algos`, or the module's
  attribute where it is not yet a function).
The two trees alternate, `--rounds` times; each row is the median CPU seconds (user + system) of a tree's rounds,
then the ratios this tree / baseline. What it measures: CPU on the path to a served engine (each test swarm pays it)
and whether the total to a first update moved (it should not: verl is imported later, not skipped).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.baseline import baseline_tree
from bench.results import emit
from scripts.source_tree import pythonpath
from tests.support.procs import REPO, offline_env

BENCH = "trainer_import"
CODE = {
    "serve": "import ajet_trainer.embedded.session",
    "train": "import ajet_trainer.embedded.session, ajet_trainer.grpo as g\ncallable(g.core_algos) and g.core_algos()",
}
"""What each figure imports, in a fresh interpreter."""


def cpu_seconds(tree: Path, code: str) -> float:
    """User + system CPU seconds of one fresh process of `tree` running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = offline_env(PYTHONPATH=pythonpath(tree), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a git ref whose trainer to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, baseline_tree(args.baseline, Path(tmp) / "baseline") as wt:
        for _ in range(args.rounds):
            for tree, path in (("this", REPO), ("baseline", wt)):
                for figure, code in CODE.items():
                    runs.setdefault((tree, figure), []).append(cpu_seconds(path, code))
    med = {key: statistics.median(values) for key, values in runs.items()}
    for (tree, figure), seconds in med.items():
        emit(BENCH, {"tree": args.baseline if tree == "baseline" else "this", "figure": figure,
                     "cpu_s": round(seconds, 3), "rounds": args.rounds})  # fmt: skip
    ratios = {f"{f}_this_over_baseline": round(med[("this", f)] / med[("baseline", f)], 3) for f in CODE}
    emit(BENCH, {"figure": "ratios", "baseline": args.baseline, **ratios})


if __name__ == "__main__":
    main()

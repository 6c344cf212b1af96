"""A baseline commit's tree beside this one, for the benches that compare the two in one run."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.support.procs import REPO


@contextmanager
def baseline_tree(ref: str, where: Path) -> Iterator[Path]:
    """`ref` checked out at `where` in a detached git worktree of this repository; removed on exit."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], capture_output=True)

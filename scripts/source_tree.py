"""The folders that hold the project's packages, as pyproject.toml lists them for setuptools, and the PYTHONPATH
that runs a tree's code without installing it (a checkout, or a baseline worktree of an older commit: each tree is
read from its own pyproject.toml).

`python scripts/source_tree.py` prints this checkout's PYTHONPATH.
"""

from __future__ import annotations

import os
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
"""The checkout's root."""


def source_folders(root: Path = REPO) -> tuple[str, ...]:
    """The package folders of the tree at `root` (`[tool.setuptools.packages.find] where`), lowest floor first."""
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    return tuple(meta["tool"]["setuptools"]["packages"]["find"]["where"])


def pythonpath(root: Path = REPO) -> str:
    """The tree's package folders joined as a PYTHONPATH."""
    return os.pathsep.join(str(root / folder) for folder in source_folders(root))


if __name__ == "__main__":
    print(pythonpath())

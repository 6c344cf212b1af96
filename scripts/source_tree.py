"""The folders that hold the project's packages, as its two pyproject.toml files list them for setuptools (the SDK's at
the root, the servers' in server/), and the PYTHONPATH that runs a tree's code without installing it (a checkout, or
a baseline worktree of an older commit: each tree is read from its own files).

`python scripts/source_tree.py` prints this checkout's PYTHONPATH.
"""

from __future__ import annotations

import os
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
"""The checkout's root."""

DISTRIBUTIONS = ("pyproject.toml", "server/pyproject.toml")
"""The project's distributions, the SDK's first (a tree older than the split has the root's alone)."""


def source_folders(root: Path = REPO) -> tuple[str, ...]:
    """The package folders of the tree at `root` (each distribution's `[tool.setuptools.packages.find] where`, relative
    to `root`), lowest floor first."""
    folders: list[str] = []
    for meta in DISTRIBUTIONS:
        if (root / meta).is_file():
            where = tomllib.loads((root / meta).read_text())["tool"]["setuptools"]["packages"]["find"]["where"]
            folders += [os.path.normpath(os.path.join(os.path.dirname(meta), folder)) for folder in where]
    return tuple(folders)


def pythonpath(root: Path = REPO) -> str:
    """The tree's package folders joined as a PYTHONPATH."""
    return os.pathsep.join(str(root / folder) for folder in source_folders(root))


if __name__ == "__main__":
    print(pythonpath())

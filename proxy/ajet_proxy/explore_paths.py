"""Where the explorer shows each experiment: under `/explore/x/<slug>/...` (the explorer's root serves the default
experiment's pages too, as it did before experiments had names). Read by the explorer and by the monitor's links,
without the explorer's imports."""

from __future__ import annotations

EXPERIMENT_PATH = "/x"
"""The path, under the explorer's root, of the experiments' pages."""


def experiment_base(root: str, slug: str) -> str:
    """The path of experiment `slug`'s pages under the explorer's `root` (`/explore`, or a full URL)."""
    return f"{root}{EXPERIMENT_PATH}/{slug}"

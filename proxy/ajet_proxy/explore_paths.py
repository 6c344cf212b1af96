"""Where the explorer shows each experiment: the first's pages at its root (`/explore/...`), every other's under
`/explore/x/<slug>/...`. Read by the explorer and by the monitor's links, without the explorer's imports."""

from __future__ import annotations

from ajet_store.placement import FIRST_SLUG

EXPERIMENT_PATH = "/x"
"""The path, under the explorer's root, of the experiments other than the first."""


def experiment_base(root: str, slug: str) -> str:
    """The path of experiment `slug`'s pages under the explorer's `root` (`/explore`, or a full URL)."""
    return root if slug == FIRST_SLUG else f"{root}{EXPERIMENT_PATH}/{slug}"

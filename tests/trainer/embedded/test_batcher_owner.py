"""The batcher owns the policy versions its rows run under: no other module of the trainer assigns them (the
design's one owner per piece of state); they change through `Batcher.set_version`, `forget` and `paused`."""

from __future__ import annotations

import re

from tests.support.procs import REPO

WRITES = re.compile(
    r"batcher\.(versions\[[^\]]*\]|policy_version)\s*=(?!=)|batcher\.versions\.(pop|update|clear|setdefault)\("
)


def test_only_the_batcher_changes_its_versions():
    hits = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in (REPO / "trainer").rglob("*.py")
        if path.name != "batcher.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    ]
    assert not hits, "the batcher's versions are written from outside it:\n" + "\n".join(hits)

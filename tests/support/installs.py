"""The venvs of docs/usage.md's install lines (`make setup-installs`, `scripts/install_lines.py`): one per line, as
the docs write it, under `.venv-install/<n>`. Shared by tests/test_install_lines.py and tests/test_client_install.py
(the wheel line's venv is the client machine's install)."""

from __future__ import annotations

from pathlib import Path

from tests.support.procs import REPO
from tests.support.require import need

ROOT = REPO / ".venv-install"
LINES = (ROOT / "lines.txt").read_text().splitlines() if (ROOT / "lines.txt").is_file() else []
"""The lines the venvs were built from, in the docs' order."""


def venv_of(fragment: str) -> Path:
    """The venv of the docs' install line that is `fragment`, else of the one line holding it; skips (fails under
    `AJET_REQUIRE_INSTALLS=1`) when it was not built."""
    need(bool(LINES), f"no {ROOT}: `make setup-installs` builds it", "AJET_REQUIRE_INSTALLS")
    exact = [i for i, line in enumerate(LINES) if line == fragment]
    (n,) = exact or [i for i, line in enumerate(LINES) if fragment in line]
    where = ROOT / str(n)
    need((where / ".ajet-line").is_file(), f"{where} was not built: `make setup-installs`", "AJET_REQUIRE_INSTALLS")
    return where

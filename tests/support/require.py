"""What a test needs that a machine may lack (PostgreSQL, vLLM's CPU build, the frameworks' environment, a tmpfs,
the install lines' venvs, a browser): without it the test skips, or fails naming it when its
`AJET_REQUIRE_*` variable is 1. `make test` sets every one, so CI cannot pass by skipping."""

from __future__ import annotations

import os

import pytest

REQUIRED = (
    "AJET_REQUIRE_PG",
    "AJET_REQUIRE_VLLM",
    "AJET_REQUIRE_FRAMEWORKS",
    "AJET_REQUIRE_TMPFS",
    "AJET_REQUIRE_INSTALLS",
    "AJET_REQUIRE_BROWSER",
)
"""The variables `make test` sets (tests/test_commands.py checks the Makefile sets each)."""


def need(present: bool, what: str, variable: str) -> None:
    """Go on when `present`; else fail naming `what` under `variable`=1, or skip."""
    if present:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{what} ({variable}=1: this run must not skip it)")
    pytest.skip(what)


def require_postgres() -> None:
    """PostgreSQL's server binaries, or `AJET_TEST_PG_URL`."""
    from tests.support import postgres

    need(postgres.available(), "no PostgreSQL binaries and no AJET_TEST_PG_URL: install postgresql", "AJET_REQUIRE_PG")

"""Proxy fixtures shared by the API tests: a real proxy in front of a scripted embedded engine."""

import pytest

from tests.support.scripted_swarm import scripted_swarm


@pytest.fixture(scope="module")
def swarm(module_tmp):
    """A `ScriptedSwarm` for the module (its own store, proxy and engine)."""
    with scripted_swarm(module_tmp) as s:
        yield s

"""The data plane's shared fixture: a `SwarmClient` of the module's proxy, ROLLING on the stub engine."""

import pytest

from ajet import SwarmClient
from tests.support.rolling import ensure_rolling


@pytest.fixture(scope="module")
def client(proxy, store, stub):
    c = SwarmClient(proxy.url)
    ensure_rolling(c, store, stub.url)
    yield c
    c.close()

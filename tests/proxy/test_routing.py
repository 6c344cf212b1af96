"""The policy router's deployment table: loads from several threads never leave an older table in place."""

from ajet_proxy.routing import PolicyRouter
from ajet_store.types import Deployment


def deps(n: int) -> list[Deployment]:
    return [Deployment(f"d{i}", f"http://127.0.0.1:{9000 + i}/v1", f"m{i}", 0) for i in range(n)]


def test_a_late_load_of_an_older_version_does_not_replace_a_newer_table():
    router = PolicyRouter()
    router.load(deps(3), version=3)  # the poll loaded the newest table
    router.load(deps(1), version=1)  # a control route's slower load of an older one finishes after it
    assert router.version == 3 and sorted(router.deployments) == ["d0", "d1", "d2"]
    picked = {router.pick().name for _ in range(60)}
    assert len(picked) >= 2  # the LiteLLM router holds all three as well

"""The engine router's table: loads from several threads never leave an older table in place."""

import subprocess
import sys

from ajet_proxy.routing import EngineRouter
from ajet_store.types import RegisteredEngine
from tests.support.procs import offline_env


def deps(n: int) -> list[RegisteredEngine]:
    return [RegisteredEngine(f"d{i}", f"http://127.0.0.1:{9000 + i}/v1", f"m{i}", 0) for i in range(n)]


def test_a_late_load_of_an_older_version_does_not_replace_a_newer_table():
    router = EngineRouter()
    router.load(deps(3), version=3)  # the poll loaded the newest table
    router.load(deps(1), version=1)  # a control route's slower load of an older one finishes after it
    assert router.version == 3 and sorted(router.engines) == ["d0", "d1", "d2"]
    picked = {router.pick().name for _ in range(60)}
    assert len(picked) >= 2  # the LiteLLM router holds all three as well


def test_one_engine_needs_no_litellm_router_and_the_litellm_path_always_has_one():
    # in a fresh interpreter: another test of this worker may have imported LiteLLM already
    code = (
        "import sys\n"
        "from ajet_proxy.routing import EngineRouter\n"
        "from ajet_store.types import RegisteredEngine\n"
        "r = EngineRouter()\n"
        "r.load([RegisteredEngine('d0', 'http://127.0.0.1:9000/v1', 'm0', 0)], version=1)\n"
        "assert r.router is None and r.pick().name == 'd0', r.router\n"
        "assert 'litellm' not in sys.modules, 'a single engine imported LiteLLM'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=offline_env())
    assert done.returncode == 0, done.stderr[-2000:]
    litellm_path = EngineRouter(always_build=True)
    litellm_path.load(deps(1), version=1)
    assert litellm_path.router is not None and litellm_path.pick().name == "d0"
    grown = EngineRouter()
    grown.load(deps(1), version=1)
    grown.load(deps(2), version=2)  # a second engine registered: now there is a choice to make
    assert grown.router is not None and {grown.pick().name for _ in range(40)} == {"d0", "d1"}

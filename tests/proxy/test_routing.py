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
    assert [router.pick().name for _ in range(6)] == ["d0", "d1", "d2"] * 2  # the table of three, in turn


def test_only_the_litellm_path_builds_a_litellm_router():
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
    grown.load(deps(2), version=2)  # a second engine registered: a choice to make, in turn, without LiteLLM
    assert grown.router is None and {grown.pick().name for _ in range(2)} == {"d0", "d1"}


def test_new_episodes_take_the_live_engines_in_turn_and_a_sticky_one_keeps_its_engine():
    """Sequential episodes spread evenly (LiteLLM's random shuffle once put eight in a row on one of two engines, and
    tests/vllm_real/test_swarm_vllm.py failed); a cooling engine is passed over; an episode's own engine is kept."""
    router = EngineRouter()
    router.load(deps(3), version=1)
    assert [router.pick().name for _ in range(6)] == ["d0", "d1", "d2", "d0", "d1", "d2"]
    router.mark_failed("d1", "connection refused")
    assert [router.pick().name for _ in range(4)] == ["d0", "d2", "d0", "d2"]  # two live ones, still in turn
    assert router.pick(sticky="d2").name == "d2" and router.pick(sticky="d2").name == "d2"
    assert router.pick(exclude={"d0", "d1"}).name == "d2"


def test_an_engine_withdrawn_while_a_call_tried_it_leaves_the_others_to_try():
    """CI, stop 69: a call tried vllm-1 as the trainer withdrew it (its process was killed); the table then held
    vllm-0 alone, and counting the tried names against the table's size said none was left ("no engine reachable
    (tried vllm-1)") while vllm-0 was up."""
    router = EngineRouter()
    router.load(deps(2), version=1)
    tried = ["d1"]
    router.mark_failed("d1", "connection refused")
    router.load(deps(1), version=2)  # the trainer withdrew d1
    assert router.untried(tried) and router.pick(exclude=tried).name == "d0"
    assert not router.untried(tried + ["d0"])

"""Two clients with different datasets and rewards train one model; stats and the monitor show each mission."""

import asyncio
import time

import pytest

from ajet import Task
from ajet.types import EpisodeStatus
from ajet_proxy.overwatch import Overwatch
from tests.support.swarm import running_swarm
from tutorial.example_multi_mission.missions import MISSIONS, digits_reward, letters_reward

pytestmark = pytest.mark.slow


def test_rewards_differ_per_mission():
    t = Task(task_id="x", metadata={"target": "3"})
    assert digits_reward(t, "3") == 1.0 and digits_reward(t, "4") == 0.5 and digits_reward(t, "q") == 0.0
    assert letters_reward(Task(task_id="y", metadata={"target": "c"}), "c") == 1.0
    assert letters_reward(Task(task_id="y", metadata={"target": "c"}), "4") == 0.0


def test_two_missions_one_model(tmp_path):
    with running_swarm(tmp_path, name="mm") as sw:
        procs = [
            sw.popen_module(
                "tutorial.example_multi_mission.agent_roll", "--mission", m, "--swarm-url", sw.url, "--max-steps", "1"
            )
            for m in ("letters", "digits")
        ]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs) + sw.logs()
        store = sw.store()
        ended = store.episodes(status=EpisodeStatus.ENDED)
        by_mission = {m: [e for e in ended if e.mission == m] for m in MISSIONS}
        assert all(by_mission.values()), {m: len(v) for m, v in by_mission.items()}
        for name, eps in by_mission.items():  # each mission's episodes carry its own reward rule
            for e in eps:
                task = Task(**e.metadata["task"])
                assert e.reward == MISSIONS[name].reward(task, e.metadata["workflow"]["answer"])
        first = store.steps()[0]
        consumed = [e for e in ended if e.consumed_step == first.step]
        assert {e.mission for e in consumed} == {"letters", "digits"}  # one step mixes both missions
        stat = sw.client().get_rollout_stat()
        assert {m.mission for m in stat.missions} >= {"letters", "digits"}

        async def monitor():
            app = Overwatch(sw.url, refresh=0.3)
            async with app.run_test(size=(150, 40)) as pilot:
                deadline = time.monotonic() + 10
                table = app.query_one("#missions")
                while table.row_count < 2:
                    assert time.monotonic() < deadline
                    await pilot.pause(0.1)
                return sorted(str(table.get_row_at(i)[0]) for i in range(table.row_count))

        assert asyncio.run(monitor()) == ["digits", "letters"]

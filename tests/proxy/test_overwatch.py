"""Overwatch against a live proxy on loopback with a seeded store (Textual's pilot, real HTTP)."""

import asyncio
import time
from pathlib import Path

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet.types import BatchMode
from ajet_proxy.overwatch import Overwatch
from ajet_proxy.overwatch_views import EpisodeScreen
from ajet_store import sqlite_url
from tests.support.procs import REPO, start_proxy
from tests.support.rolling import ensure_rolling

OUTPUT = REPO / "test-output"


def text(app, selector) -> str:
    return str(app.query_one(selector).content)


async def settle(pilot, until, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the monitor did not show the expected state"
        await pilot.pause(0.1)


@pytest.fixture(scope="module")
def seeded(proxy, store, stub):
    client = SwarmClient(proxy.url)
    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2, experiment_name="watch"))
    for task_id, rewards in (("alpha", [1.0, 0.0]), ("beta", [0.5, 0.5])):
        for r in rewards:
            uuid, creds = client.begin_episode()
            creds.as_openai_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            client.end_episode(Task(task_id=task_id), uuid, WorkflowOutput(reward=r))
    open_uuid, creds = client.begin_episode()
    creds.as_openai_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "still here"}])
    store.record_step(1, 1, [], 0.25, {"loss": 0.5, "grad_norm": 1.5, "entropy": 2.0})
    store.record_step(2, 2, [], 0.75, {"loss": 0.25, "grad_norm": 1.0, "entropy": 1.5})
    return client, open_uuid


def test_no_chart_before_the_first_step(tmp_path):
    px = start_proxy(tmp_path, sqlite_url(tmp_path / "nostep.db"))

    async def scenario():
        app = Overwatch(px.url, refresh=0.2)
        async with app.run_test(size=(150, 40)) as pilot:
            await settle(pilot, lambda: "CONNECTED" in text(app, "#status"))
            await pilot.pause(0.3)
            chart = app.query_one("#chart")
            return app.history, chart.has_class("has-steps"), chart.display, text(app, "#reward")

    try:
        history, has_steps, shown, reward = asyncio.run(scenario())
    finally:
        px.close()
    assert history == [] and not has_steps and not shown and reward == "no training step yet"


def test_panels_show_the_store_and_mode_switch_reaches_the_server(proxy, store, seeded):
    client, open_uuid = seeded

    async def scenario():
        app = Overwatch(proxy.url, refresh=0.3)
        async with app.run_test(size=(170, 48)) as pilot:
            await settle(pilot, lambda: "ROLLING" in text(app, "#status"))
            status = text(app, "#status")
            assert "CONNECTED" in status and "step 2" in status and "policy v2" in status and "calls 5" in status
            pool = text(app, "#pool")
            assert "4/4" in pool and "2/2" in pool and "1/2" in pool  # episodes, tasks, non-dummy tasks
            assert "step 2" in text(app, "#reward") and "reward 0.750" in text(app, "#reward")
            assert [(s.step, s.reward_mean) for s in app.history] == [(1, 0.25), (2, 0.75)]  # the full history
            chart = app.query_one("#chart")
            assert chart.has_class("has-steps") and chart.display
            drawn = chart.plt.build()  # the chart as it is drawn: a title and labelled axes
            assert "reward over 2 steps" in drawn and "training step" in drawn and "mean reward" in drawn
            episodes = app.query_one("#episodes")
            assert episodes.row_count == 1
            assert str(episodes.get_row_at(0)[0]) == open_uuid
            tasks = app.query_one("#tasks")
            assert sorted(str(tasks.get_row_at(i)[0]) for i in range(tasks.row_count)) == ["alpha", "beta"]
            clients = app.query_one("#clients")
            assert any(str(clients.get_row_at(i)[0]) == client.client_id for i in range(clients.row_count))
            OUTPUT.mkdir(exist_ok=True)
            await pilot.pause(0.2)  # let the table paint its rows before the screenshot
            shot = Path(app.save_screenshot(filename="overwatch.svg", path=str(OUTPUT)))
            assert shot.is_file() and "ROLLING" in shot.read_text()

            await pilot.press("3")
            await settle(pilot, lambda: store.experiment().batch_mode == BatchMode.NON_DUMMY_TASKS)
            await pilot.press("1")
            await settle(pilot, lambda: store.experiment().batch_mode == BatchMode.EPISODES)

            app.query_one("#episodes").focus()
            await pilot.press("enter")
            await settle(pilot, lambda: isinstance(app.screen, EpisodeScreen))
            assert app.screen.detail.episode_uuid == open_uuid and len(app.screen.detail.calls) == 1
            assert app.screen.detail.calls[0].messages[0]["content"] == "still here"
            link = str(app.screen.query_one("#episode-link").content)
            assert link.endswith(f"/explore/x/default/episodes/{open_uuid}") and app.screen.page_url in link
            await pilot.press("escape")

    asyncio.run(scenario())


def test_stopped_proxy_shows_disconnected_and_reconnects(module_tmp, stub):
    from tests.support.procs import free_port

    port = free_port()
    url = sqlite_url(module_tmp / "watch2.db")
    px = start_proxy(module_tmp, url, port=port)

    async def scenario():
        nonlocal px
        app = Overwatch(px.url, refresh=0.3)
        async with app.run_test(size=(140, 40)) as pilot:
            await settle(pilot, lambda: "CONNECTED" in text(app, "#status") and "OFFLINE" in text(app, "#status"))
            px.close()
            await settle(pilot, lambda: "DISCONNECTED" in text(app, "#status"))
            assert "(retrying)" in text(app, "#status")
            px = start_proxy(module_tmp, url, port=port)
            await settle(pilot, lambda: "DISCONNECTED" not in text(app, "#status"), timeout=20)
            assert "OFFLINE" in text(app, "#status")

    try:
        asyncio.run(scenario())
    finally:
        px.close()


def header_once(url: str, words: str) -> str:
    """The monitor's header text once it shows `words`."""

    async def scenario():
        app = Overwatch(url, refresh=0.2)
        async with app.run_test(size=(150, 40)) as pilot:
            await settle(pilot, lambda: words in text(app, "#status"))
            return text(app, "#status")

    return asyncio.run(scenario())


def test_the_trainers_last_error_is_shown(tmp_path):
    """A refused boot is written to the store by the trainer; the monitor's header names it."""
    from ajet.types import ExperimentState
    from ajet_store import Store

    url = sqlite_url(tmp_path / "err.db")
    st = Store(url)
    st.record_trainer_error(
        "boot failed: CheckpointError: checkpoint A does not match store B", to=ExperimentState.OFFLINE
    )
    px = start_proxy(tmp_path, url)
    try:
        status = header_once(px.url, "trainer error")
    finally:
        px.close()
        st.close()
    assert "checkpoint A does not match store B" in status and "engine OFFLINE" in status


def test_the_template_preflight_is_shown(tmp_path):
    """The trainer's verdict on the job's template: the header says which shapes fall back and why."""
    from ajet.template_verdict import ShapeVerdict, TemplateVerdict
    from ajet_store import Store

    url = sqlite_url(tmp_path / "tpl.db")
    st = Store(url)
    st.sync_job(AgentJetJob(model="builtin:tiny-bpe-gemma3"))
    shapes = [
        ShapeVerdict(shape="linear", labels=["first", "extended"], expected=["first", "extended"]),
        ShapeVerdict(shape="tool_loop", labels=[], expected=[], error="TemplateError: roles must alternate"),
    ]
    st.set_template_verdict(TemplateVerdict(model="builtin:tiny-bpe-gemma3", shapes=shapes))
    px = start_proxy(tmp_path, url)
    try:
        status = header_once(px.url, "template:")
    finally:
        px.close()
        st.close()
    assert "merges linear" in status and "tool_loop (TemplateError: roles must alternate)" in status


def test_an_asynchronous_update_shows_beside_rolling(tmp_path):
    """The trainer says an asynchronous update runs; the header and the text summary show it beside ROLLING."""
    from ajet.rollout_summary import format_rollout_stat
    from ajet.types import ExperimentState
    from ajet_store import Store

    url = sqlite_url(tmp_path / "upd.db")
    st = Store(url)
    st.sync_and_start(AgentJetJob(batch_size=1, max_staleness=1))
    st.transition(ExperimentState.ROLLING)
    st.set_updating(True)
    px = start_proxy(tmp_path, url)
    try:
        status = header_once(px.url, "updating")
        client = SwarmClient(px.url)
        assert client.get_engine_status().updating
        assert "ROLLING (" in format_rollout_stat(client.get_rollout_stat()).splitlines()[0]
        assert "+ updating" in format_rollout_stat(client.get_rollout_stat()).splitlines()[0]
        st.transition(ExperimentState.BOOTING)  # a reboot ends the update
        assert not client.get_engine_status().updating
        client.close()
    finally:
        px.close()
        st.close()
    assert "engine ROLLING" in status and "+ updating" in status


def test_the_step_line_shows_the_token_history():
    """Merge rate, sequences and tokens per episode, fallbacks by reason, and the template's causes; nothing for a
    step recorded before the token history was measured."""
    from ajet_proxy.overwatch_views import history_text

    metrics = {
        "history/merge_rate": 0.75,
        "history/sequences_per_episode": 1.5,
        "history/tokens_per_episode": 812.4,
        "history/fallback/history_edited": 2.0,
        "history/fallback/tools_changed": 0.0,
        "history/template_breaks/think_stripping": 1.0,
    }
    line = history_text(metrics)
    assert "merged 75% of turns" in line and "1.50 seqs/episode" in line and "812 tokens/episode" in line
    assert "fallbacks history_edited 2" in line and "tools_changed" not in line
    assert "the template re-renders history: think_stripping" in line
    assert history_text({"loss": 0.1}) == ""


def test_the_monitor_lists_the_experiments_and_switches_between_them(tmp_path):
    """Two experiments on one swarm: the Experiments tab lists both with their states; `e` watches the other, and
    the header and the running episodes are then that experiment's."""
    from ajet_store import Store
    from tests.support.procs import start_stub
    from tests.support.rolling import rolling_beside

    stub = start_stub(tmp_path)
    url = sqlite_url(tmp_path / "two.db")
    first, px = Store(url), start_proxy(tmp_path, url)
    a = SwarmClient(px.url, verbose=False)
    ensure_rolling(a, first, stub.url, AgentJetJob(project_name="p", experiment_name="a", lora_rank=8))
    second = rolling_beside(first, stub.url, lora_rank=8)
    try:
        b = SwarmClient(px.url, experiment="p/b", verbose=False)
        uuid_b, _ = b.begin_episode()
        b.close()

        async def scenario():
            app = Overwatch(px.url, refresh=0.2)
            async with app.run_test(size=(150, 40)) as pilot:
                await settle(pilot, lambda: app.query_one("#experiments").row_count == 2)
                rows = [app.query_one("#experiments").get_row_at(i) for i in range(2)]
                before = (text(app, "#status"), app.query_one("#episodes").row_count)
                await pilot.press("e")
                await settle(pilot, lambda: "[p/b]" in text(app, "#status"))
                await settle(pilot, lambda: app.query_one("#episodes").row_count == 1)
                key = app.query_one("#episodes").coordinate_to_cell_key((0, 0)).row_key.value
                return rows, before, key

        rows, before, key = asyncio.run(scenario())
    finally:
        a.close()
        px.close()
        stub.close()
        second.close()
        first.close()
    assert [r[1:3] for r in rows] == [["p/a (default)", "ROLLING"], ["p/b", "ROLLING"]] and rows[0][0] == "▶"
    assert "[p/a]" in before[0] and before[1] == 0  # the default's: no episode open there
    assert key == uuid_b

"""The explorer in a real browser: headless Chromium (Debian's package, driven by Playwright, nothing downloaded)
against a store that a short real run filled (proxy + trainer + the tiny-letters agent), served by the running
proxy at `/explore` and by `ajet-proxy explore` behind a swarm token. Each page loads and shows what the store
holds; the token view of a known episode has the trainer's trained/masked split; a `<script>` answer stays text;
a new step appears on the runs page without a reload; a wrong token is refused. With `AJET_SCREENSHOTS=DIR`
each page is saved there (docs/images/ holds the ones the docs show)."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet_store import Store
from ajet_store.sequences import episode_sequences
from tests.support.faults import scripted_policy_env
from tests.support.procs import Proc, free_port, offline_env
from tests.support.require import need
from tests.support.scripted_swarm import script_ids
from tests.support.swarm import Swarm, running_swarm

HOSTILE_ANSWER = "<script>window.__pwned = 1</script><b>bold?</b>"
HOSTILE_USER = '<img src=x onerror="window.__pwned = 2">'


pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip
"""Chromium's own connections to Google's hosts are off: this machine reaches none."""


@pytest.fixture(scope="module")
def browser():
    need(CHROMIUM.is_file(), "no /usr/bin/chromium: install Debian's chromium (.ci/run does)", "AJET_REQUIRE_BROWSER")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield b
        b.close()


@dataclass
class Run:
    """A swarm whose trainer's policy answers what `script` says (else itself), and what was played on it."""

    swarm: Swarm
    client: SwarmClient
    script: Path
    tok: Any
    two_calls: str = ""
    hostile: str = ""

    @property
    def url(self) -> str:
        return self.swarm.url

    def store(self) -> Store:
        return self.swarm.store()

    def call(self, creds: Any, messages: list[dict[str, str]], answer: Optional[str] = None) -> str:
        if answer is not None:
            self.script.write_text(json.dumps([script_ids(self.tok, answer)]))
        limit = 64 if answer is not None else 12  # a scripted answer whole, the model's own short
        out = creds.as_openai_client().chat.completions.create(model=creds.model, messages=messages, max_tokens=limit)
        return out.choices[0].message.content or ""

    def group(self, task: str) -> None:
        """One GRPO group of two episodes (rewards 1 and 0): the trainer takes a step of it."""
        before = len(self.store().steps())
        for reward in (1.0, 0.0):
            uuid, creds = self.client.begin_episode()  # waits while the last group's step runs
            user = [{"role": "user", "content": f"Say the letter: {task}"}]
            first = self.call(creds, user)
            if not self.two_calls:  # an answer, a tool's result inserted, another answer: trained and masked tokens
                self.two_calls = uuid
                self.call(creds, [*user, {"role": "assistant", "content": first}, {"role": "user", "content": "ok"}])
            self.client.end_episode(Task(task_id=task), uuid, WorkflowOutput(reward=reward))
        deadline = time.monotonic() + 120
        while len(self.store().steps()) == before:
            assert time.monotonic() < deadline, self.swarm.logs()
            time.sleep(0.2)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two training steps of a real run, and one episode whose user message and answer are hostile."""
    from transformers import AutoTokenizer

    from ajet_trainer.tiny_model import builtin_model_path

    tmp = tmp_path_factory.mktemp("run")
    script = tmp / "policy.json"
    job = AgentJetJob(model="builtin:tiny", batch_size=1, num_repeat=2, max_response_length_in_one_turn=64)
    with running_swarm(tmp, **scripted_policy_env(script)) as sw:
        client = sw.client()
        client.sync_train_config(job)
        client.start_engine()
        run = Run(sw, client, script, AutoTokenizer.from_pretrained(str(builtin_model_path("builtin:tiny"))))
        run.group("a")
        uuid, creds = client.begin_episode()
        run.hostile = uuid
        run.call(creds, [{"role": "user", "content": HOSTILE_USER}], HOSTILE_ANSWER)
        client.end_episode(Task(task_id="b"), uuid, WorkflowOutput(reward=0.5))
        uuid, creds = client.begin_episode()
        run.call(creds, [{"role": "user", "content": "Say the letter: b"}])
        client.end_episode(Task(task_id="b"), uuid, WorkflowOutput(reward=0.0))
        yield run


def shot(page, name: str) -> None:
    where = os.environ.get("AJET_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"explorer-{name}.png"), full_page=True)


def test_the_runs_page_shows_the_steps_and_a_new_one_appears_live(browser, run):
    page, st = browser.new_page(viewport={"width": 1200, "height": 900}), run.store()
    page.goto(run.url + "/explore/")
    assert page.locator("svg.chart").count() == 6
    steps = st.steps()
    rows = page.locator("#steps tr[data-step]")
    assert rows.count() == len(steps)
    shown = {r.get_attribute("data-step"): r.locator("td.reward").inner_text() for r in rows.all()}
    assert shown == {str(s.step): f"{s.reward_mean:.4f}" for s in steps}
    shot(page, "runs")
    newest = steps[-1].step
    run.group("c")
    page.wait_for_selector(f'#steps tr[data-step="{newest + 1}"]', timeout=60_000)  # polled, never reloaded
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_a_steps_episodes_and_its_group(browser, run):
    page, st = browser.new_page(viewport={"width": 1200, "height": 900}), run.store()
    step = st.steps()[0]
    page.goto(f"{run.url}/explore/episodes?step={step.step}&sort=reward")
    links = page.locator("#episodes a[href^='/explore/episodes/']")
    assert links.count() == min(step.num_episodes, 50)
    rewards = [float(t) for t in page.locator("#episodes td.reward").all_inner_texts()]
    assert rewards == sorted(rewards, reverse=True)
    shot(page, "episodes")
    page.goto(f"{run.url}/explore/steps/{step.step}")
    assert page.locator("b.reward").first.inner_text() == f"{step.reward_mean:.4f}"
    shot(page, "step")
    page.locator("#groups a").first.click()
    page.wait_for_url("**/explore/groups/**")  # the click navigates: read the group's page, not the step's
    members = page.locator("article.member")
    members.first.wait_for()
    assert members.count() >= 1
    advantages = [float(a) for a in page.locator("b.advantage").all_inner_texts()]
    assert abs(sum(advantages)) < 1e-3 * len(advantages) + 1e-6  # GRPO advantages of a group sum to zero
    shot(page, "group")


def test_the_token_view_of_a_known_episode(browser, run):
    page, st = browser.new_page(viewport={"width": 1200, "height": 900}), run.store()
    uuid = run.two_calls
    page.goto(f"{run.url}/explore/episodes/{uuid}")
    seqs, _, _ = episode_sequences(st.calls(uuid), uuid, "")
    assert page.locator("section.sequence").count() == len(seqs)
    trained = sum(sum(s.response_mask) for s in seqs)
    assert page.locator(".tok.trained").count() == trained > 0
    masked = sum(len(s.response_ids) for s in seqs) - trained
    assert page.locator(".tok.masked").count() == masked > 0  # the second call's inserted turn
    title = page.locator(".tok.trained").first.get_attribute("title")
    assert re.match(r"logprob -?\d+\.\d{4} · token \d+ · call 0 · policy v\d+", title or ""), title
    shot(page, "episode")


def test_a_script_answer_stays_text(browser, run):
    page = browser.new_page()
    page.goto(f"{run.url}/explore/episodes/{run.hostile}")
    assert page.evaluate("window.__pwned") is None
    assert "<script>window.__pwned = 1</script>" in page.locator("pre.answer").first.inner_text()
    assert HOSTILE_USER in page.locator(".msg.user pre").first.inner_text()
    assert page.locator("main img, main script, main b:text('bold?')").count() == 0


def test_the_explore_command_refuses_a_wrong_token(browser, run, tmp_path):
    port = free_port()
    proc = Proc([str(Path(sys.executable).parent / "ajet-proxy"), "explore", "--db", run.swarm.db_url, "--port",
                 str(port), "--swarm-token", "tok-1"], f"http://127.0.0.1:{port}", "/explore/login",
                tmp_path / "explore.log", env=offline_env())  # fmt: skip
    try:
        page = browser.new_page()
        response = page.goto(proc.url + "/explore/")
        assert response is not None and response.status == 401
        page.fill("input[name=token]", "wrong")
        page.click("button")
        page.wait_for_selector("text=That is not the swarm token.")  # the form answered 401, again the form
        page.fill("input[name=token]", "tok-1")
        page.click("button")
        page.wait_for_selector("svg.chart")
        assert page.locator("#steps tr[data-step]").count() == len(run.store().steps())
    finally:
        proc.close()


def test_the_monitors_link_to_the_third_experiment_lands_and_its_links_stay_there(browser, tmp_path):
    """A running proxy serving three experiments: the monitor's link to an episode of the third opens that
    episode's page; its step link, its nav and the runs page's experiment links land on the third's pages."""
    from ajet_proxy.overwatch import Overwatch
    from ajet_store import experiment_store, sqlite_url
    from ajet_store.placement import experiment_slug
    from ajet_trainer.tiny_model import builtin_model_path
    from tests.support.explore_store import fill
    from tests.support.procs import start_proxy

    model = str(builtin_model_path("builtin:tiny"))
    first = Store(sqlite_url(tmp_path / "swarm.db"))
    fill(first, model)
    for name in ("b-run", "c-run"):
        st = experiment_store(first, f"explore/{name}")
        fill(st, model, name, prefix=name[0] + "-")
        st.close()
    proxy = start_proxy(tmp_path, first.url)
    try:
        monitor = Overwatch(proxy.url, refresh=1.0)
        monitor.experiments = monitor.client.list_experiments()  # as the monitor lists them: slugs from the swarm
        assert [e.slug for e in monitor.experiments][0] == "default" and len(monitor.experiments) == 3
        monitor.client.experiment = "explore/c-run"
        third = f"/explore/x/{experiment_slug('explore/c-run')}"
        page = browser.new_page()
        page.goto(f"{monitor._explorer_base()}/episodes/c-s1-task-a-0")
        page.wait_for_selector("h1")
        assert "c-s1-task-a-0" in page.inner_text("main")
        page.click("main a[href*='/groups/']")  # trained at step 1: its GRPO group
        page.wait_for_url(f"**{third}/groups/**")
        assert "c-s1-task-a-" in page.inner_text("main")
        page.click("nav a:text('episodes')")
        page.wait_for_url(f"**{third}/episodes")
        assert page.locator("#episodes a[href*='/episodes/c-']").count() > 0
        page.goto(proxy.url + "/explore/")
        assert page.locator("nav a.experiment").count() == 3
        page.click("nav a.experiment:text('explore/c-run')")
        page.wait_for_url(f"**{third}/")
        page.wait_for_selector("svg.chart")
    finally:
        proxy.close()
        first.close()

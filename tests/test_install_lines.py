"""Each install line of docs/usage.md, in a fresh venv of its own, runs what the line promises.

`make setup-installs` (part of `make test`) builds the venvs with `scripts/install_lines.py`, which reads the
lines from the docs, so a line the docs change is the line tested. Each promise is checked in its own venv:
- `-e .`: the SDK alone, which talks to a running proxy, with no server code (no package of the servers'
  distribution) and none of their dependencies;
- `-e . -e './server[proxy]'`: the proxy serves, the monitor's command runs, no torch;
- `-e '.[client]'`: the OpenAI SDK through `as_openai_client`, pyarrow for parquet datasets, no torch;
- `torch==2.13.0` then `-e . -e './server[all]'`: CPU torch, the trainer and the verl backend, and constrained decoding:
  smolagents' default `ToolCallingAgent` (every call forced) served by that venv's engine, the agent run from
  the test's own environment as a user's would be;
- the wheels, the servers' with `[proxy]`: the installed wheels, not the checkout (tests/test_client_install.py
  runs the rest in that venv: the client machine's install).
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import httpx
import pytest

from ajet_proxy.explore import TOKEN_COOKIE
from ajet_store import sqlite_url
from tests.support.installs import LINES, venv_of
from tests.support.procs import REPO, Proc, free_port, offline_env, start_proxy

pytestmark = pytest.mark.slow


def run_in(where: Path, script: str, absent: tuple[str, ...] = (), timeout: float = 300) -> str:
    """Run `script` in the venv; it then prints `absent: [...]`, the modules of `absent` that cannot be imported."""
    check = (
        f"\nimport importlib.util as u\nprint('absent:', sorted(m for m in {list(absent)} if u.find_spec(m) is None))"
    )
    res = subprocess.run(
        [str(where / "bin" / "python"), "-c", textwrap.dedent(script) + check],
        capture_output=True, text=True, timeout=timeout, cwd=REPO.parent, env=offline_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


SERVER_PACKAGES = ("ajet_core", "ajet_proxy", "ajet_store", "ajet_swarm", "ajet_token_history", "ajet_trainer")
"""The servers' distribution's packages (server/pyproject.toml), none of which a client's SDK install carries."""


def test_the_docs_list_the_five_install_lines():
    assert len(LINES) == 5 and any("[all]" in line for line in LINES), LINES


def test_the_sdk_alone_talks_to_a_running_proxy(tmp_path):
    where = venv_of("pip install -e .")
    proxy = start_proxy(tmp_path, sqlite_url(tmp_path / "s.db"))
    try:
        out = run_in(where, f"""
            from ajet import AgentJetJob, SwarmClient
            client = SwarmClient("{proxy.url}")
            client.sync_train_config(AgentJetJob(experiment_name="sdk-only"))
            status = client.get_engine_status()
            print("state:", status.state.value, status.experiment_name)
        """, absent=("fastapi", "litellm", "torch", "sqlalchemy", "openai", *SERVER_PACKAGES))  # fmt: skip
    finally:
        proxy.close()
    assert "state: OFFLINE sdk-only" in out, out  # no trainer: the synced job waits
    assert f"absent: {sorted(['fastapi', 'litellm', 'openai', 'sqlalchemy', 'torch', *SERVER_PACKAGES])}" in out


def test_the_proxy_extra_serves_without_torch(tmp_path):
    """It serves, and the explorer's login form parses (it was a 500 in this install: Starlette parses forms with
    python-multipart, which only the test venv had, through another package)."""
    where = venv_of("'./server[proxy]'")
    port = free_port()
    proxy = Proc(
        [str(where / "bin" / "ajet-proxy"), "start", "--port", str(port), "--db", sqlite_url(tmp_path / "p.db")],
        f"http://127.0.0.1:{port}", "/health", tmp_path / "proxy.log", env=offline_env(AJET_SWARM_TOKEN="t0ken"),
    )  # fmt: skip
    try:
        login = httpx.post(proxy.url + "/explore/login", data={"token": "t0ken"}, follow_redirects=False)
        assert login.status_code == 303 and TOKEN_COOKIE in login.headers.get("set-cookie", ""), login.text
    finally:
        proxy.close()
    res = subprocess.run([str(where / "bin" / "ajet-swarm"), "overwatch", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "usage:" in res.stdout
    assert "absent: ['torch']" in run_in(where, "", absent=("torch",))


def test_the_client_extra_gives_the_openai_sdk_and_parquet(tmp_path):
    where = venv_of("'.[client]'")
    out = run_in(where, """
        import pyarrow, pyarrow.parquet as pq
        from ajet.types import OpenaiBaseUrlAndApiKey
        creds = OpenaiBaseUrlAndApiKey(episode_uuid="e", base_url="http://127.0.0.1:1/v1", api_key="k", model="m")
        client = creds.as_openai_client()
        print("client:", type(client).__module__, client.base_url)
        pq.write_table(pyarrow.table({"q": ["2+3"]}), "/dev/null")
    """, absent=("torch",))  # fmt: skip
    assert "client: openai" in out and "absent: ['torch']" in out


def test_the_full_install_has_cpu_torch_the_trainer_and_verl():
    where = venv_of("'./server[all]'")
    out = run_in(where, """
        import torch, verl.trainer.ppo.core_algos, ajet_trainer.verl.trainer, ajet_trainer.cli
        print("torch", torch.__version__, "cuda", torch.version.cuda)
    """, absent=("xgrammar", "triton", "outlines_core"))  # fmt: skip
    assert "torch 2.13.0" in out and "cuda None" in out
    assert "absent: ['triton', 'xgrammar']" in out  # outlines-core is the install's constrained decoding


ENGINE = """
    import json, sys, time
    sys.path.insert(0, {repo!r})  # the tests' scripted model: the tiny model, each answer's tokens favoured
    from ajet import AgentJetJob
    from ajet_trainer.embedded.server import EmbeddedEngine
    from ajet_trainer.policy import load_policy
    from ajet_trainer.tiny_model import builtin_model_path
    from tests.support.scripted_model import FileScriptedModel

    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    answers = [[i for p in pieces for i in tok.encode(p, add_special_tokens=False)] + [tok.eos_token_id]
               for pieces in {answers!r}]
    with open({script!r}, "w") as f:
        json.dump(answers, f)
    engine = EmbeddedEngine(FileScriptedModel(model, {script!r}), tok, model_name="policy", port={port})
    print(engine.start(), flush=True)
    while True:
        time.sleep(1)
"""


def test_the_full_install_serves_smolagents_tool_calling_agent(tmp_path):
    """smolagents' ToolCallingAgent forces every call (`tool_choice` "required"): the [all] install's engine
    constrains them (a 400 "constrained decoding needs ..." otherwise), and the agent gets its answer."""
    from smolagents import ToolCallingAgent, tool
    from smolagents.memory import ActionStep
    from smolagents.models import OpenAIServerModel

    from tests.support.framework_agents import add, call

    where, port = venv_of("'./server[all]'"), free_port()
    answers = [call("add", a=2, b=3), call("final_answer", answer="5")]
    script = ENGINE.format(repo=str(REPO), answers=answers, script=str(tmp_path / "script.json"), port=port)
    engine = Proc([str(where / "bin" / "python"), "-c", textwrap.dedent(script)], f"http://127.0.0.1:{port}",
                  "/health", tmp_path / "engine.log", env=offline_env())  # fmt: skip
    try:
        model = OpenAIServerModel(model_id="policy", api_base=f"http://127.0.0.1:{port}/v1", api_key="none")
        agent = ToolCallingAgent(tools=[tool(add)], model=model, max_steps=3)
        assert str(agent.run("What is 2+3?")) == "5", engine.log_tail()
        steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
        calls = [c.function.name for s in steps for c in s.model_output_message.tool_calls]
        assert calls == ["add", "final_answer"], engine.log_tail()
    finally:
        engine.close()


def test_the_wheel_line_installs_the_wheel_not_the_checkout():
    where = venv_of("pip wheel")
    out = run_in(where, "import ajet, ajet_proxy; print(ajet.__file__, ajet_proxy.__file__)").splitlines()[0]
    assert all("site-packages" in f for f in out.split()), out

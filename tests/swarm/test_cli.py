"""`ajet-swarm start`: listens on all interfaces (agents run on other machines), says where to connect, picks
its backend, and hands the swarm token and the store URL to its children by environment, never on a command
line."""

import time

import pytest

from ajet_swarm.cli import banner, build_parser, child_commands, child_env
from ajet_trainer.factory import choose_backend

OTHER_ADDRESS = "127.0.0.2"
"""A loopback address other than 127.0.0.1: it answers only when the server listens on all interfaces."""


def test_start_listens_on_all_interfaces_and_passes_the_ray_settings():
    args = build_parser().parse_args(
        ["start", "--db", "sqlite:///x.db", "--ray-address", "10.0.0.1:6379", "--nnodes", "2"]
    )
    proxy, trainer = child_commands(args)
    assert proxy[proxy.index("--host") + 1] == "0.0.0.0"
    assert trainer[trainer.index("--backend") + 1] == "auto"
    assert (
        trainer[trainer.index("--ray-address") + 1] == "10.0.0.1:6379" and trainer[trainer.index("--nnodes") + 1] == "2"
    )
    assert build_parser().parse_args(["start", "--host", "127.0.0.1"]).host == "127.0.0.1"
    tuned = build_parser().parse_args(
        ["start", "--transport", "litellm", "--max-body-bytes", "1000", "--commit-window-ms", "2"]
    )
    proxy, _trainer = child_commands(tuned)  # the proxy's own options reach the proxy
    assert [proxy[proxy.index(f) + 1] for f in ("--transport", "--max-body-bytes", "--commit-window-ms")] == [
        "litellm",
        "1000",
        "2.0",
    ]


def test_the_banner_says_where_to_connect_and_whether_a_token_guards_it():
    text = banner("0.0.0.0", 10086, False, "sqlite:///x.db")
    assert "all interfaces" in text and ":10086" in text and "AJET_SWARM_TOKEN" in text
    assert "token required" in banner("127.0.0.1", 10086, True, "s") and "only" in banner("127.0.0.1", 1, True, "s")


@pytest.mark.parametrize(
    "cuda,verl,vllm,want",
    [
        (True, True, True, "verl"),
        (False, True, True, "embedded"),
        (True, False, True, "embedded"),
        (True, True, False, "embedded"),
        (False, False, False, "embedded"),
    ],
)
def test_backend_auto_picks_verl_only_where_it_can_run(cuda, verl, vllm, want):
    backend, why = choose_backend(cuda, verl, vllm)
    assert backend == want and why
    if want == "embedded":
        assert why.startswith("missing here")


def test_the_token_never_reaches_a_command_line(monkeypatch):
    monkeypatch.delenv("AJET_SWARM_TOKEN", raising=False)
    db = "postgresql://ajet:hunter2@127.0.0.1/ajet"
    args = build_parser().parse_args(["start", "--swarm-token", "s3cret", "--db", db])
    proxy, trainer = child_commands(args)
    assert not any("s3cret" in a or "hunter2" in a for a in proxy + trainer)
    assert child_env(args)["AJET_DB"] == db
    assert "--swarm-token" not in proxy
    assert child_env(args)["AJET_SWARM_TOKEN"] == "s3cret"
    assert proxy[proxy.index("--db-mode") + 1] == "600" and trainer[trainer.index("--db-mode") + 1] == "600"
    open_args = build_parser().parse_args(["start", "--db", "sqlite:///x.db"])
    assert "AJET_SWARM_TOKEN" not in child_env(open_args)


def test_ajet_swarm_start_runs_both_children_with_no_secret_in_their_command_lines(tmp_path):
    """The real thing: both children start from the environment alone, the trainer reaches the store, and
    `ps` (here /proc/PID/cmdline) shows neither the token nor the store URL."""
    import sys
    import time
    from pathlib import Path

    import psutil

    from ajet_store import Store, sqlite_url
    from tests.support.procs import Proc, free_port

    db, port, token = sqlite_url(tmp_path / "swarm.db"), free_port(), "swarm-s3cret"
    swarm = Proc(
        [
            str(Path(sys.executable).with_name("ajet-swarm")),
            "start",
            "--swarm-port",
            str(port),
            "--db",
            db,
            "--swarm-token",
            token,
            "--experiment-dir",
            str(tmp_path / "exp"),
            "--device",
            "cpu",
        ],
        f"http://{OTHER_ADDRESS}:{port}",
        "/health",
        tmp_path / "swarm.log",
    )
    st = Store(db)
    try:
        deadline = time.monotonic() + 60
        while st.experiment().trainer_heartbeat is None:  # the trainer found the store through AJET_DB
            assert time.monotonic() < deadline, swarm.log_tail()
            time.sleep(0.2)
        children = psutil.Process(swarm.proc.pid).children()
        assert len(children) == 2
        for child in children:
            cmdline = " ".join(child.cmdline())
            assert token not in cmdline and str(tmp_path / "swarm.db") not in cmdline, cmdline
        assert "swarm.db" in swarm.log_tail()  # the store is named, masked where it holds a password
    finally:
        swarm.close()
        st.close()


@pytest.mark.parametrize("mode", ["default", "given", "open"])
def test_a_default_start_is_reachable_from_another_address(tmp_path, monkeypatch, mode):
    """Reachable on 127.0.0.2 (all interfaces). By default the control API is closed: the swarm makes a token,
    keeps it in a file only its owner reads and prints the line clients need; a given token guards it the same way;
    `--open` opens it and the proxy warns once. The SDK reads the token from AJET_SWARM_TOKEN, so seed code runs
    unchanged against a protected server."""
    import stat
    import sys
    from pathlib import Path

    import httpx

    from ajet import SwarmClient
    from ajet_store import sqlite_url
    from tests.support.procs import Proc, free_port

    port, token_file = free_port(), tmp_path / "conf" / "swarm_token"
    args = [
        str(Path(sys.executable).with_name("ajet-swarm")),
        "start",
        "--swarm-port",
        str(port),
        "--db",
        sqlite_url(tmp_path / "swarm.db"),
        "--experiment-dir",
        str(tmp_path / "exp"),
        "--device",
        "cpu",
        "--swarm-token-file",
        str(token_file),
    ]
    extra = {"default": [], "given": ["--swarm-token", "swarm-s3cret"], "open": ["--open"]}[mode]
    swarm = Proc(args + extra, f"http://{OTHER_ADDRESS}:{port}", "/health", tmp_path / "swarm.log")
    try:
        url = f"http://{OTHER_ADDRESS}:{port}"
        assert httpx.get(url + "/swarm/get_engine_status").status_code == (200 if mode == "open" else 401)
        assert httpx.get(url + "/explore/live").status_code == (200 if mode == "open" else 401)  # loopback: opened
        token = {"default": None, "given": "swarm-s3cret", "open": None}[mode]
        if mode == "default":
            token = token_file.read_text().strip()
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert f"export AJET_SWARM_TOKEN={token}" in swarm.log_tail()  # printed once, where it is kept
            assert swarm.log_tail().count(token) == 1 and str(token_file) in swarm.log_tail()
        else:
            assert not token_file.exists()
        if token:
            monkeypatch.setenv("AJET_SWARM_TOKEN", token)
        client = SwarmClient(url)
        assert client.get_engine_status().state.value
        client.close()
        assert "all interfaces" in swarm.log_tail()
        assert ("--open and no swarm token" in swarm.log_tail()) == (mode == "open")  # the proxy warns once, when open
    finally:
        swarm.close()


@pytest.mark.parametrize("child", ["trainer", "proxy"])
def test_a_child_that_dies_stops_the_swarm_non_zero_naming_it(tmp_path, child):
    """SIGKILL of one child: the other is stopped, one line names the dead child and how it died, and the exit
    status is non-zero (128 + the signal, as a shell reports it), so a supervisor restarts the swarm (issue 30:
    `max(max(code, 0))` turned -9 into 0)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import psutil

    from ajet_store import Store, sqlite_url
    from tests.support.procs import Proc, free_port

    db, port = sqlite_url(tmp_path / "swarm.db"), free_port()
    cmd = [str(Path(sys.executable).with_name("ajet-swarm")), "start", "--host", "127.0.0.1", "--swarm-port", str(port),
           "--db", db, "--experiment-dir", str(tmp_path / "exp"), "--device", "cpu"]  # fmt: skip
    swarm = Proc(cmd, f"http://127.0.0.1:{port}", "/health", tmp_path / "swarm.log")
    st = Store(db)
    try:
        deadline = time.monotonic() + 60
        while st.experiment().trainer_heartbeat is None:
            assert time.monotonic() < deadline, swarm.log_tail()
            time.sleep(0.2)
        module = "ajet_trainer" if child == "trainer" else "ajet_proxy"
        children = psutil.Process(swarm.proc.pid).children()
        [victim] = [c for c in children if module in " ".join(c.cmdline())]
        [other] = [c for c in children if c.pid != victim.pid]
        victim.send_signal(signal.SIGKILL)
        try:
            code = swarm.proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail("the swarm went on without its " + child)
        assert code == 128 + signal.SIGKILL, swarm.log_tail()
        assert f"ajet-swarm: the {child} was killed by SIGKILL" in swarm.log_tail()
        assert not other.is_running()  # the other child was stopped (and waited for) before the swarm exited
    finally:
        swarm.close()
        st.close()


def test_how_the_swarm_reports_a_child_that_died():
    from ajet_swarm.cli import died_line, exit_status

    assert died_line("trainer", -9) == "ajet-swarm: the trainer was killed by SIGKILL; stopping the swarm"
    assert died_line("proxy", 3) == "ajet-swarm: the proxy exited with status 3; stopping the swarm"
    assert exit_status([("trainer", -9)], []) == 137
    assert exit_status([("proxy", 0)], []) == 1  # a child has no reason to stop on its own
    assert exit_status([], [0, -15]) == 0  # stopped by the user: the children's SIGTERM is expected
    assert exit_status([], [0, 2]) == 2


def test_the_engine_key_lives_only_in_the_store(tmp_path):
    """The embedded engine's internal key must be sent by the proxy, so the store keeps it as is (not hashed): it
    is found there, in files only the owner reads, and nowhere else: not in the logs, the children's command lines
    or environments, nor any answer of the control API or the monitor."""
    import stat
    import sys
    from pathlib import Path

    import httpx
    import psutil

    from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
    from ajet_store import Store, sqlite_url
    from tests.support.procs import Proc, free_port

    db_path, port = tmp_path / "swarm.db", free_port()
    swarm = Proc(
        [str(Path(sys.executable).with_name("ajet-swarm")), "start", "--swarm-port", str(port), "--db",
         sqlite_url(db_path), "--experiment-dir", str(tmp_path / "exp"), "--device", "cpu", "--log-level", "debug",
         "--open"],
        f"http://127.0.0.1:{port}", "/health", tmp_path / "swarm.log",
    )  # fmt: skip
    st = Store(sqlite_url(db_path))
    try:
        client = SwarmClient(swarm.url, verbose=False)
        client.auto_sync_train_config_and_start_engine(AgentJetJob(model="builtin:tiny", batch_size=1, num_repeat=1))
        uuid, creds = client.begin_episode()
        creds.as_openai_client().chat.completions.create(model="policy", messages=[{"role": "user", "content": "a"}])
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
        key = st.engines()[0].api_key
        assert key and len(key) >= 32
        answers = [httpx.get(f"{swarm.url}{path}").text for path in
                   ("/swarm/get_engine_status", "/swarm/get_rollout_stat", "/openapi.json", "/health")]  # fmt: skip
        answers.append(httpx.post(f"{swarm.url}/swarm/get_episode", json={"episode_uuid": uuid}).text)
        assert all(a and "Error" not in a[:40] for a in answers), answers
        assert all(key not in a for a in answers)
        for child in psutil.Process(swarm.proc.pid).children(recursive=True):
            assert key not in " ".join(child.cmdline()) and key not in str(child.environ())
        assert key not in swarm.log_tail(10**7)
        logs = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".log", ".jsonl", ".txt", ".yaml")]
        assert all(key not in p.read_text(errors="replace") for p in logs)
        for f in tmp_path.glob("swarm.db*"):  # the database, its WAL and shared memory: the owner's only
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    finally:
        swarm.close()
        st.close()


@pytest.mark.slow
def test_swarm_with_several_proxies_on_postgresql(tmp_path):
    """`ajet-swarm start --proxies 2` on a PostgreSQL store: two proxy workers on the one port beside the trainer;
    an episode runs through them; a worker killed is started again, and episodes go on meanwhile."""
    import signal
    import sys
    import time
    from pathlib import Path

    import psutil

    from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
    from tests.support import postgres
    from tests.support.procs import Proc, free_port
    from tests.support.require import require_postgres

    require_postgres()

    def one_episode(client: SwarmClient) -> None:
        uuid, creds = client.begin_episode()
        oc = creds.as_openai_client(max_retries=3)
        oc.chat.completions.create(model="policy", messages=[{"role": "user", "content": "a"}], max_tokens=2)
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))

    with postgres.postgres_url() as server:
        db, port = postgres.fresh_database(server, "swarm_proxies"), free_port()
        swarm = Proc(
            [str(Path(sys.executable).with_name("ajet-swarm")), "start", "--host", "127.0.0.1", "--swarm-port",
             str(port), "--db", db, "--proxies", "2", "--experiment-dir", str(tmp_path / "exp"), "--device", "cpu"],
            f"http://127.0.0.1:{port}", "/health", tmp_path / "swarm.log",
        )  # fmt: skip
        try:
            client = SwarmClient(swarm.url, verbose=False)
            client.auto_sync_train_config_and_start_engine(
                AgentJetJob(model="builtin:tiny", batch_size=4, num_repeat=2)
            )
            proxy = next(c for c in psutil.Process(swarm.proc.pid).children() if "ajet_proxy.cli" in c.cmdline())
            workers = proxy.children()
            assert len(workers) == 2
            for _ in range(3):
                one_episode(client)
            workers[0].send_signal(signal.SIGKILL)
            for _ in range(3):
                one_episode(client)  # the other worker serves meanwhile
            deadline = time.monotonic() + 30
            while "was killed by SIGKILL; starting it again" not in swarm.log_tail(10**6):
                assert time.monotonic() < deadline, swarm.log_tail()
                time.sleep(0.2)
            while len([c for c in proxy.children() if c.status() != psutil.STATUS_ZOMBIE]) < 2:
                assert time.monotonic() < deadline, swarm.log_tail()
                time.sleep(0.2)
            one_episode(client)
            assert swarm.proc.poll() is None  # a worker's death is the proxy's business, not the swarm's
        finally:
            swarm.close()

"""`ajet-swarm start` hands the swarm token and the store URL to its children by environment, never on a
command line."""

from ajet_swarm.cli import build_parser, child_commands, child_env


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
    swarm = Proc([str(Path(sys.executable).with_name("ajet-swarm")), "start", "--swarm-port", str(port), "--db", db,
                  "--swarm-token", token, "--experiment-dir", str(tmp_path / "exp"), "--device", "cpu"],
                 f"http://127.0.0.1:{port}", "/health", tmp_path / "swarm.log")
    st = Store(db)
    try:
        deadline = time.monotonic() + 60
        while st.engine_row().trainer_heartbeat is None:  # the trainer found the store through AJET_DB
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

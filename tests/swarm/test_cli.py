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

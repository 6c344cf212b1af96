"""`ajet-swarm start` hands the swarm token to its children by environment, never on a command line."""

from ajet_swarm.cli import build_parser, child_commands, child_env


def test_the_token_never_reaches_a_command_line(monkeypatch):
    monkeypatch.delenv("AJET_SWARM_TOKEN", raising=False)
    args = build_parser().parse_args(["start", "--swarm-token", "s3cret", "--db", "sqlite:///x.db"])
    proxy, trainer = child_commands(args)
    assert not any("s3cret" in a for a in proxy + trainer)
    assert "--swarm-token" not in proxy
    assert child_env(args)["AJET_SWARM_TOKEN"] == "s3cret"
    assert proxy[proxy.index("--db-mode") + 1] == "600" and trainer[trainer.index("--db-mode") + 1] == "600"
    open_args = build_parser().parse_args(["start", "--db", "sqlite:///x.db"])
    assert "AJET_SWARM_TOKEN" not in child_env(open_args)

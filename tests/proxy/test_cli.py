"""The proxy CLI: beyond loopback a token is made and kept unless `--open`, which warns."""

import logging
import sys
import types

from ajet_proxy import cli


def test_public_bind_without_token_makes_one_and_open_warns(monkeypatch, caplog, capsys, tmp_path):
    """Beyond loopback without a token, `ajet-proxy start` serves with a token it made and kept (printed once, with
    the line clients need); `--open` serves without one, and warns."""
    ran = {}

    class Server:  # uvicorn's, serving the socket the command bound first
        def __init__(self, config):
            self.config = config

        def run(self, sockets):
            ran.update(self.config, bound=[s.getsockname()[0] for s in sockets])
            for s in sockets:
                s.close()

    monkeypatch.setitem(sys.modules, "uvicorn", types.SimpleNamespace(Config=lambda app, **kw: kw, Server=Server))
    monkeypatch.delenv("AJET_SWARM_TOKEN", raising=False)
    parser = cli.argparse.ArgumentParser()
    cli.add_start_arguments(parser)  # the real `ajet-proxy start` arguments and defaults
    token_file = tmp_path / "conf" / "token"
    args = parser.parse_args(
        ["--host", "0.0.0.0", "--port", "0", "--db", f"sqlite:///{tmp_path}/x.db", "--log-level", "warning",
         "--swarm-token-file", str(token_file)]
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(cli.argparse.Namespace(**vars(args)))
    made = token_file.read_text().strip()
    assert ran["host"] == "0.0.0.0" and ran["bound"] == ["0.0.0.0"]  # bound before uvicorn runs
    assert f"export AJET_SWARM_TOKEN={made}" in capsys.readouterr().out and len(made) >= 40
    assert not any("no swarm token" in r.message for r in caplog.records)
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(cli.argparse.Namespace(**{**vars(args), "open": True}))
    assert any("--open and no swarm token" in r.message for r in caplog.records)
    assert "AJET_SWARM_TOKEN=" not in capsys.readouterr().out

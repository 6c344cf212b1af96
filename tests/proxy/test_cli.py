"""The proxy CLI: loopback detection for the no-token warning, and the warning itself."""

import logging
import sys
import types

from ajet_proxy import cli


def test_loopback_detection():
    assert cli._is_loopback("127.0.0.1") and cli._is_loopback("localhost") and cli._is_loopback("::1")
    assert not cli._is_loopback("0.0.0.0") and not cli._is_loopback("10.1.2.3") and not cli._is_loopback("trainbox")


def test_public_bind_without_token_warns(monkeypatch, caplog, tmp_path):
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
    args = parser.parse_args(
        ["--host", "0.0.0.0", "--port", "0", "--db", f"sqlite:///{tmp_path}/x.db", "--log-level", "warning"]
    )
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(args)
    assert ran["host"] == "0.0.0.0" and any("without --swarm-token" in r.message for r in caplog.records)
    assert ran["bound"] == ["0.0.0.0"]  # bound before uvicorn runs
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(cli.argparse.Namespace(**{**vars(args), "swarm_token": "t"}))
    assert not any("without --swarm-token" in r.message for r in caplog.records)

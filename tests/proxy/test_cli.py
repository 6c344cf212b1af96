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
    monkeypatch.setitem(sys.modules, "uvicorn", types.SimpleNamespace(run=lambda app, **kw: ran.update(kw)))
    monkeypatch.delenv("AJET_SWARM_TOKEN", raising=False)
    parser = cli.argparse.ArgumentParser()
    cli.add_start_arguments(parser)  # the real `ajet-proxy start` arguments and defaults
    args = parser.parse_args(
        ["--host", "0.0.0.0", "--port", "1", "--db", f"sqlite:///{tmp_path}/x.db", "--log-level", "warning"]
    )
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(args)
    assert ran["host"] == "0.0.0.0" and any("without --swarm-token" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ajet_proxy"):
        cli.run_proxy(cli.argparse.Namespace(**{**vars(args), "swarm_token": "t"}))
    assert not any("without --swarm-token" in r.message for r in caplog.records)

"""`configs/`: the defaults each command uses, `--config FILE` under the command line, checked like flags."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ajet import AgentJetJob
from ajet.errors import ConfigError
from ajet.utils import flags as client_flags
from ajet_core import flags
from ajet_core.options import declared, options_from_args
from ajet_proxy import cli as proxy_cli
from ajet_proxy.config import ProxyConfig
from ajet_swarm.cli import build_parser, child_commands, parse_args
from ajet_trainer import cli as trainer_cli
from ajet_trainer.options import TrainerOptions
from tests.support.procs import REPO

CONFIGS = REPO / "configs"


def _start_parser(add) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add(p)
    return p


def test_the_shipped_folder_is_the_top_level_configs():
    assert client_flags.config_dir().resolve() == CONFIGS.resolve()
    assert {p.name for p in CONFIGS.glob("*.yaml")} == {
        "proxy.yaml",
        "trainer.yaml",
        "swarm.yaml",
        "job.yaml",
        "verl_overrides.yaml",
    }


def test_job_yaml_is_the_default_job_dumped(tmp_path):
    dumped = AgentJetJob().dump_job_as_yaml(tmp_path / "job.yaml")
    assert yaml.safe_load((CONFIGS / "job.yaml").read_text()) == yaml.safe_load(dumped.read_text())
    assert AgentJetJob.from_yaml(CONFIGS / "job.yaml") == AgentJetJob()


@pytest.mark.parametrize(
    "name,add", [("proxy.yaml", proxy_cli.add_start_arguments), ("trainer.yaml", trainer_cli.add_trainer_arguments)]
)
def test_each_file_holds_exactly_the_options_of_its_command(name, add, monkeypatch):
    for var in flags.ENV_DEFAULTS.values():
        monkeypatch.delenv(var, raising=False)
    parser = _start_parser(add)
    shipped = client_flags.shipped(name)
    assert set(shipped) == set(flags.options(parser))
    parsed = vars(parser.parse_args([]))
    parsed.pop("config")
    assert {k: (str(v) if k == "db_mode" else v) for k, v in parsed.items()} == shipped


def test_swarm_yaml_holds_only_swarm_options_and_both_commands_default_to_one_store():
    swarm = flags.options(flags.subcommand(build_parser(), "start"))
    assert set(client_flags.shipped("swarm.yaml")) <= set(swarm)
    assert client_flags.shipped("proxy.yaml")["db"] == client_flags.shipped("trainer.yaml")["db"]


OTHER_MEANINGS = {
    "trainer/ajet_trainer/cli.py: --experiment-dir": "`export-model`'s folder to read (required), not `start`'s",
    "proxy/ajet_proxy/cli.py: --swarm-token": "the token a monitor presents, not the one a proxy requires",
    "proxy/ajet_proxy/explore/serve.py: --host": "where the explorer listens (its own default, 127.0.0.1)",
    "proxy/ajet_proxy/explore/serve.py: --port": "the explorer's port (8765), not the proxy's",
    "proxy/ajet_proxy/explore/serve.py: --swarm-token": "the token the explorer's pages require",
}
"""Flags of other commands that share a name with a `start` option but not its meaning."""
SHARED_KEYS = {"log_level"}
"""Keys of every server command's file declared once for all of them (`ajet_core.flags.add_log_level_option`)."""


@pytest.mark.parametrize("cls,name", [(TrainerOptions, "trainer.yaml"), (ProxyConfig, "proxy.yaml")])
def test_each_option_is_declared_once_as_a_field_and_defaulted_once_in_its_file(cls, name):
    """Issue 63: `vllm_max_experiments` was written in five places. Now an option is a field of its process's settings
    (flag, type, choices and help generated from it) and a key of its file (the default), nowhere else."""
    options = declared(cls)
    keys = {d.key for d in options}
    assert keys | SHARED_KEYS == set(client_flags.shipped(name))
    by_field = {f.name: f for f in dataclasses.fields(cls)}
    assert all(by_field[d.field].default is dataclasses.MISSING for d in options)  # configs/ is the only default
    assert all(len(d.doc) > 10 for d in options), [d.field for d in options if len(d.doc) <= 10]
    hand_written = [
        f"{path.relative_to(REPO)}: {flag}"
        for path in sorted(REPO.glob("*/ajet_*/**/*.py"))
        for flag in {d.flag for d in options}
        if re.search(r"add_argument\([^)]*[\"']" + re.escape(flag) + r"[\"']", path.read_text())
    ]
    assert set(hand_written) <= set(OTHER_MEANINGS)  # no parser declares one of them by hand
    assert cls.from_config().db_url == client_flags.shipped(name)["db"]


def test_the_parsed_flags_and_the_file_give_the_same_settings(monkeypatch):
    for var in flags.ENV_DEFAULTS.values():
        monkeypatch.delenv(var, raising=False)
    trainer = trainer_cli.trainer_options(_start_parser(trainer_cli.add_trainer_arguments).parse_args([]))
    assert trainer == TrainerOptions.from_config()
    proxy = options_from_args(ProxyConfig, _start_parser(proxy_cli.add_start_arguments).parse_args([]))
    assert proxy == ProxyConfig.from_config() and proxy.limits.images.max_pixels > 0


def test_derived_constants_come_from_configs():
    from ajet_proxy.limits import DEFAULT_LIMITS
    from ajet_store.connect import DEFAULT_FILE_MODE

    assert DEFAULT_LIMITS.max_body_bytes == client_flags.shipped("proxy.yaml")["max_body_bytes"]
    assert DEFAULT_FILE_MODE == int(client_flags.shipped("proxy.yaml")["db_mode"], 8)
    assert client_flags.default_swarm_url({}) == f"http://127.0.0.1:{client_flags.shipped('proxy.yaml')['port']}"
    assert client_flags.default_swarm_url({"AJET_SWARM_URL": "http://x:1"}) == "http://x:1"


def test_environment_beats_the_file_and_the_command_line_beats_both(monkeypatch):
    monkeypatch.setenv("AJET_DB", "sqlite:///env.db")
    parser = _start_parser(proxy_cli.add_start_arguments)
    assert parser.parse_args([]).db == "sqlite:///env.db"
    assert parser.parse_args(["--db", "sqlite:///cli.db"]).db == "sqlite:///cli.db"


def test_a_config_file_sets_options_under_the_command_line(tmp_path):
    cfg = tmp_path / "swarm.yaml"
    cfg.write_text("port: 9999\nengine: vllm\nvllm_arg: ['--dtype=bfloat16']\ndb_mode: '640'\ntransport: litellm\n")
    args = parse_args(["start", "--config", str(cfg), "--transport", "aiohttp"])
    assert (args.port, args.engine, args.vllm_arg, args.db_mode, args.transport) == (
        9999,
        "vllm",
        ["--dtype=bfloat16"],
        0o640,
        "aiohttp",
    )
    proxy, trainer = child_commands(args)
    assert proxy[proxy.index("--port") + 1] == "9999" and "--vllm-arg=--dtype=bfloat16" in trainer
    assert "--config" not in proxy + trainer  # the children get the resolved flags, not the file


@pytest.mark.parametrize(
    "text,needle",
    [
        ("engine: turbo\n", "'turbo' is not one of"),
        ("port: eighty\n", "invalid value 'eighty'"),
        ("enigne: vllm\n", "did you mean 'engine'"),
        ("- just\n- a list\n", "expected a mapping"),
        ("port: [1, 2]\n", "expected one value"),
    ],
)
def test_a_bad_config_file_is_a_config_error_naming_the_key(tmp_path, text, needle):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        parse_args(["start", "--config", str(cfg)])


def test_a_missing_config_file_is_one_line_from_each_command(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    for prog in ("ajet-proxy", "ajet-trainer", "ajet-swarm"):
        res = subprocess.run(
            [str(Path(sys.executable).with_name(prog)), "start", "--config", missing],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 1 and res.stderr.strip() == f"{prog}: error: config file not found: {missing}"


def test_the_trainer_reads_a_config_file(tmp_path):
    cfg = tmp_path / "trainer.yaml"
    cfg.write_text("backend: verl\nnnodes: 3\nthreads: 2\n")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    trainer_cli.add_trainer_arguments(sub.add_parser("start"))
    opts = trainer_cli.trainer_options(
        flags.parse_with_config(parser, ["start", "--config", str(cfg), "--nnodes", "4"])
    )
    assert (opts.backend, opts.nnodes) == ("verl", 4)


def test_a_heartbeat_slower_than_half_the_silence_bound_is_refused():
    """A trainer beating every `heartbeat_s` looks silent to a store whose `trainer_timeout_s` is not well above it."""
    with pytest.raises(ConfigError, match="heartbeat_s 20 must be positive and at most half of trainer_timeout_s 30"):
        TrainerOptions.from_config(heartbeat_s=20.0, trainer_timeout_s=30.0)
    assert TrainerOptions.from_config().heartbeat_s * 2 <= TrainerOptions.from_config().trainer_timeout_s

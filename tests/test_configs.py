"""`configs/`: the defaults each command uses, `--config FILE` under the command line, checked like flags."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ajet import AgentJetJob
from ajet.errors import ConfigError
from ajet.utils import flags as client_flags
from ajet_core import flags
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


@pytest.mark.parametrize(
    "cls,name,renamed",
    [
        (TrainerOptions, "trainer.yaml", {"db": "db_url", "vllm_arg": "vllm_args"}),
        (ProxyConfig, "proxy.yaml", {"db": "db_url", "max_body_bytes": "limits",
                                     "max_image_bytes": "limits", "max_image_pixels": "limits",
                                     "commit_window_ms": "commit_window_s",
                                     "shared_store": "shared", "workers": "shared"}),
    ],
)  # fmt: skip
def test_no_settings_class_repeats_a_default_of_configs(cls, name, renamed):
    """configs/ is the only source of the commands' defaults: a field the YAML sets has no default in code."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in client_flags.shipped(name):
        field = fields.get(renamed.get(key, key))
        if field is not None:
            assert field.default is dataclasses.MISSING, f"{cls.__name__}.{field.name} repeats {name}'s {key}"
    assert cls.from_config().db_url == client_flags.shipped(name)["db"]


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

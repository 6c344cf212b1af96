"""The shipped defaults (`configs/`, in the wheel as `ajet/configs/`) and the one option every client takes.

A client, tutorial or tool names the swarm with `--swarm-url` (`add_swarm_url_option`), defaulting to
`$AJET_SWARM_URL`, else the proxy's shipped port on loopback. The server commands' flags, `--config FILE` and
forwarding are `ajet_core.flags`.
"""

from __future__ import annotations

import argparse
import os
from importlib.resources import files
from pathlib import Path
from typing import Mapping, Optional, Union

import yaml

from ajet.errors import ConfigError


def config_dir() -> Path:
    """The folder of the shipped defaults: `configs/` in a checkout, `ajet/configs/` in an installed wheel (in the
    checkout `sdk/ajet/configs` is a link to the top-level folder)."""
    return Path(str(files("ajet") / "configs"))


def read_config(path: Union[str, Path]) -> dict[str, object]:
    """A config file's mapping (an empty file is an empty mapping); `ConfigError` for a missing or bad file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of option names to values")
    return {str(k): v for k, v in data.items()}


def shipped(name: str) -> dict[str, object]:
    """The defaults of one command, `configs/NAME` (`proxy.yaml`, `trainer.yaml`, `swarm.yaml`)."""
    return read_config(config_dir() / name)


SWARM_URL_ENV = "AJET_SWARM_URL"
"""Where tutorials and tools find the swarm when no `--swarm-url` is given."""


def default_swarm_url(env: Optional[Mapping[str, str]] = None) -> str:
    """`$AJET_SWARM_URL`, else the proxy's default address (`port` of `configs/proxy.yaml`, on loopback)."""
    env = os.environ if env is None else env
    return env.get(SWARM_URL_ENV) or f"http://127.0.0.1:{shipped('proxy.yaml')['port']}"


def add_swarm_url_option(parser: argparse.ArgumentParser) -> None:
    """`--swarm-url`, the one option by which every client, tutorial and tool names the swarm."""
    parser.add_argument(
        "--swarm-url",
        default=default_swarm_url(),
        help=f"the proxy's base URL (environment: {SWARM_URL_ENV}; default: %(default)s)",
    )

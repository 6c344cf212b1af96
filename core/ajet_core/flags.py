"""The server commands' options, declared once: their defaults in `configs/`, `--config FILE`, and forwarding.

Every server command (`ajet-proxy start`, `ajet-trainer start`, `ajet-swarm start`) declares each flag once,
in the builder of the package that owns it, without a default: the defaults are the YAML files in `configs/`
(shipped in the wheel as `ajet/configs/`), one per command. Precedence, lowest first:

1. the command's file in `configs/` (`apply_defaults`);
2. an environment variable, for the few flags that have one (`ENV_DEFAULTS`: the store URL and the swarm
   token travel to child processes this way, never on a command line);
3. `--config FILE`: a YAML mapping of the same keys (`parse_with_config`), checked like the command line;
4. the command line.

`ajet-swarm start` takes the proxy's and the trainer's flags and hands them on with `to_argv`, which writes a
parsed value back as the flag that gives it, so each child gets exactly what the user asked for.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from ajet.errors import ConfigError
from ajet.job import unknown_key_error
from ajet.utils.flags import read_config, shipped

ENV_DEFAULTS: Mapping[str, str] = {
    "db": "AJET_DB",
    "swarm_token": "AJET_SWARM_TOKEN",
    "threads": "AJET_TORCH_THREADS",
    "vllm_python": "AJET_VLLM_PYTHON",
}
"""Options whose default an environment variable overrides (dest -> variable)."""

NOT_CONFIGURABLE = frozenset({"help", "config", "version"})
"""Dests that are no option of the command's work, so no config file holds them."""


def shipped_with_env(name: str, env: Optional[Mapping[str, str]] = None) -> dict[str, object]:
    """The defaults of one command as it runs them: `configs/NAME`, then `ENV_DEFAULTS` from the environment (what a
    process built in code, not from a command line, is configured with)."""
    env = os.environ if env is None else env
    values = shipped(name)
    for dest, var in ENV_DEFAULTS.items():
        if dest in values and env.get(var):
            values[dest] = env[var]
    return values


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's options by dest, without help, version and --config."""
    return {a.dest: a for a in parser._actions if a.dest not in NOT_CONFIGURABLE and a.option_strings}


def apply_defaults(parser: argparse.ArgumentParser, name: str, env: Optional[Mapping[str, str]] = None) -> None:
    """Set the parser's defaults from `configs/NAME`, for the options it has, then from `ENV_DEFAULTS`."""
    env = os.environ if env is None else env
    opts = options(parser)
    values = {k: v for k, v in shipped(name).items() if k in opts}
    for dest, var in ENV_DEFAULTS.items():
        if dest in opts and env.get(var):
            values[dest] = env[var]
    parser.set_defaults(**{k: _checked(opts[k], v, f"configs/{name}") for k, v in values.items()})
    for key, value in values.items():
        action = opts[key]
        if value is not None and action.help and "%(default)" not in action.help:
            action.help += " (default: %(default)s)"


def add_config_option(parser: argparse.ArgumentParser, name: str) -> None:
    """`--config FILE`: a YAML file of this command's options (the keys of `configs/NAME`)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"YAML of this command's options, keys as in configs/{name} (the defaults); flags on "
        "the command line win over the file",
    )


def add_log_level_option(parser: argparse.ArgumentParser) -> None:
    """`--log-level`, which every server command takes."""
    parser.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error", "critical"], type=str.lower, help="logging level"
    )


def apply_config(parser: argparse.ArgumentParser, path: Union[str, Path]) -> None:
    """Make a `--config` file's values the parser's defaults, each checked as its flag would be."""
    opts = options(parser)
    values = read_config(path)
    for key, value in values.items():
        if key not in opts:
            raise unknown_key_error(str(path), key, sorted(opts), "option")
        parser.set_defaults(**{key: _checked(opts[key], value, str(path))})


def parse_with_config(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]], commands: Sequence[str] = ("start",)
) -> argparse.Namespace:
    """Parse `argv` (default: `sys.argv[1:]`); when one of `commands` (sub-commands that take `--config`) is
    given `--config FILE`, the file's values become that sub-command's defaults first, so the command line still
    wins and `--help` shows them."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    command = next((t for t in tokens if not t.startswith("-")), None)
    path = _config_path(tokens)
    if command is not None and command in commands and path is not None:
        apply_config(subcommand(parser, command), path)
    return parser.parse_args(tokens)


def _config_path(tokens: Sequence[str]) -> Optional[str]:
    """The value of `--config FILE` or `--config=FILE` among `tokens`, if any."""
    for i, tok in enumerate(tokens):
        if tok == "--config" and i + 1 < len(tokens):
            return tokens[i + 1]
        if tok.startswith("--config="):
            return tok.split("=", 1)[1]
    return None


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the sub-command `name`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise KeyError(name)


def _checked(action: argparse.Action, value: object, where: str) -> object:
    """A config value as argparse would have parsed it from the command line (type, choices, lists)."""
    flag = action.option_strings[-1]
    if value is None:
        return None
    if action.nargs == 0:  # store_true / store_false
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {action.dest}: expected true or false for {flag}, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_one(action, item, where) for item in items]
    return _one(action, value, where)


def _one(action: argparse.Action, value: object, where: str) -> object:
    if isinstance(value, (list, dict)):
        raise ConfigError(f"{where}: {action.dest}: expected one value, got {value!r}")
    convert = action.type if callable(action.type) else None
    try:
        out = convert(str(value)) if convert is not None else str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {action.dest}: invalid value {value!r} ({exc})") from exc
    if action.choices is not None and out not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{where}: {action.dest}: {value!r} is not one of {choices}")
    return out


def to_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, skip: Sequence[str] = ()) -> list[str]:
    """`args`' values of the parser's options, written back as the flags that give them (`skip`: dests handed
    on another way). Parsing the result with `parser` gives the same values."""
    argv: list[str] = []
    for dest, action in options(parser).items():
        value = getattr(args, dest, None)
        if dest in skip or value is None:
            continue
        flag = next(s for s in action.option_strings if s.startswith("--"))
        if action.nargs == 0:
            if value != action.const:
                continue
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):
            argv += [f"{flag}={item}" for item in value]
        else:
            argv += [f"{flag}={value}"] if str(value).startswith("-") else [flag, str(value)]
    return argv

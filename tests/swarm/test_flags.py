"""`ajet-swarm start` takes every option of `ajet-proxy start` and `ajet-trainer start`, each declared once,
hands each to its child unchanged, and on a GPU box resolves to verl + verl's own vLLM (hybrid)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from ajet.utils.flags import shipped
from ajet_core.flags import options
from ajet_swarm.cli import SECRET_DESTS, build_parser, child_commands, child_parsers
from ajet_trainer import factory as backends
from ajet_trainer.cli import trainer_options


def _other_value(action: argparse.Action) -> list[str]:
    """Command-line tokens that give `action` a value other than its default."""
    flag = next(s for s in action.option_strings if s.startswith("--"))
    if action.nargs == 0:  # a switch: given, it is the other value
        return [flag]
    if action.choices is not None:
        return [flag, next(str(c) for c in reversed(list(action.choices)) if c != action.default)]
    if isinstance(action, argparse._AppendAction):
        return [f"{flag}=--first=1", f"{flag}=--second"]
    if action.dest == "db_mode":
        return [flag, "640"]
    if action.type is int:
        return [flag, str((action.default or 0) + 7)]
    if action.type is float:
        return [flag, str((action.default or 0.0) + 2.5)]
    return [flag, f"value-of-{action.dest}"]


def _child_args(parser: argparse.ArgumentParser, command: list[str]) -> argparse.Namespace:
    assert command[1:4] == ["-m", command[2], "start"]
    return parser.parse_args(command[4:])


@pytest.mark.parametrize("child", ["proxy", "trainer"])
def test_every_child_option_reaches_the_child_unchanged(child):
    proxy_parser, trainer_parser = child_parsers()
    parser = proxy_parser if child == "proxy" else trainer_parser
    opts = {d: a for d, a in options(parser).items() if d not in SECRET_DESTS}
    assert set(opts) == set(shipped(f"{child}.yaml")) - set(SECRET_DESTS)  # the real option sets, not empty ones
    argv = ["start"] + [tok for a in opts.values() for tok in _other_value(a)]
    args = build_parser().parse_args(argv)
    commands = dict(zip(("proxy", "trainer"), child_commands(args)))
    got = _child_args(parser, commands[child])
    defaults = parser.parse_args([])
    for dest in opts:
        assert getattr(got, dest) == getattr(args, dest), dest
        assert getattr(got, dest) != getattr(defaults, dest), dest  # the test value was really a change


def test_with_no_flags_each_child_gets_its_defaults_and_the_swarm_its_own_host():
    proxy_parser, trainer_parser = child_parsers()
    args = build_parser().parse_args(["start"])
    proxy, trainer = child_commands(args)
    want_proxy = vars(proxy_parser.parse_args([]))
    got_proxy = vars(_child_args(proxy_parser, proxy))
    assert got_proxy.pop("host") == "0.0.0.0" and want_proxy.pop("host") == "127.0.0.1"
    assert got_proxy == want_proxy
    assert vars(_child_args(trainer_parser, trainer)) == vars(trainer_parser.parse_args([]))


def test_swarm_help_lists_every_proxy_and_trainer_option():
    res = subprocess.run(
        [str(Path(sys.executable).with_name("ajet-swarm")), "start", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    proxy_parser, trainer_parser = child_parsers()
    flags = {s for p in (proxy_parser, trainer_parser) for a in options(p).values() for s in a.option_strings}
    flags.discard("--port")  # the swarm's port is --swarm-port, as in the seeds (--port is its alias)
    assert len(flags) + 1 == len(set(shipped("proxy.yaml")) | set(shipped("trainer.yaml")))  # + the port
    assert sorted(f for f in flags if f not in res.stdout) == []
    assert "--swarm-port" in res.stdout and "--config" in res.stdout


def test_swarm_port_and_port_are_one_option():
    parser = build_parser()
    assert (
        parser.parse_args(["start", "--swarm-port", "9"]).port == parser.parse_args(["start", "--port", "9"]).port == 9
    )


@pytest.mark.parametrize(
    "cuda,verl,vllm,want",
    [
        (True, True, True, ("verl", "hybrid")),
        (False, True, True, ("embedded", "embedded")),
        (True, False, True, ("embedded", "embedded")),
    ],
)
def test_ajet_swarm_start_resolves_to_verl_and_hybrid_on_a_cuda_box(monkeypatch, cuda, verl, vllm, want):
    """The seed's main command on a GPU server: `ajet-swarm start` with no flags trains with verl, served by
    verl's own vLLM engines."""
    monkeypatch.setattr(backends, "detect_machine", lambda: backends.Machine(cuda, verl, vllm))
    _proxy_parser, trainer_parser = child_parsers()
    _proxy, trainer = child_commands(build_parser().parse_args(["start"]))
    opts, why = backends.resolve_options(trainer_options(_child_args(trainer_parser, trainer)))
    assert (opts.backend, opts.engine) == want and why


def test_an_explicit_engine_survives_resolution(monkeypatch):
    monkeypatch.setattr(backends, "detect_machine", lambda: backends.Machine(True, True, True))
    _proxy_parser, trainer_parser = child_parsers()
    _proxy, trainer = child_commands(build_parser().parse_args(["start", "--engine", "vllm"]))
    opts, _why = backends.resolve_options(trainer_options(_child_args(trainer_parser, trainer)))
    assert (opts.backend, opts.engine) == ("verl", "vllm")

"""`ajet_core.options`: an options dataclass's fields are its command's flags, with type, choices and help."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal, Optional

import pytest

from ajet_core.options import add_options, declared, option, options_from_args, options_from_values
from ajet_store.connect import FileMode


@dataclass(frozen=True)
class Base:
    db_url: str = option(key="db")
    """Where the store is (100% of the rows)."""


@dataclass(frozen=True)
class Toy(Base):
    mode: Literal["fast", "slow"] = option()
    """How to run."""
    extra: tuple[str, ...] = option(key="extra_arg", metavar="ARG")
    """One more argument, repeatable."""
    quiet: bool = option()
    """Say nothing."""
    limit: Optional[int] = option()
    """At most this many; unset: no limit."""
    file_mode: int = option(parse=FileMode)
    """Octal permissions."""
    constant: float = 0.5
    """Not an option."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_options(p, Toy, flags={"limit": ("--cap", "--limit")})
    return p


def test_each_field_is_a_flag_with_its_kind_and_its_docstring_as_help():
    p = parser()
    by_dest = {a.dest: a for a in p._actions}
    assert [d.key for d in declared(Toy)] == ["db", "mode", "extra_arg", "quiet", "limit", "file_mode"]
    assert by_dest["db"].option_strings == ["--db"] and by_dest["db"].help == "Where the store is (100%% of the rows)."
    assert by_dest["mode"].choices == ["fast", "slow"]
    assert by_dest["limit"].option_strings == ["--cap", "--limit"] and by_dest["limit"].type is int
    assert "constant" not in by_dest
    with pytest.raises(SystemExit):
        p.parse_args(["--mode", "medium"])


def test_the_parsed_flags_and_a_file_give_the_same_settings():
    args = parser().parse_args(
        ["--db", "x", "--mode", "slow", "--extra-arg=--a", "--extra-arg=--b", "--quiet", "--cap", "3", "--file-mode",
         "640"]
    )  # fmt: skip
    from_flags = options_from_args(Toy, args)
    assert from_flags == Toy("x", "slow", ("--a", "--b"), True, 3, 0o640)
    values = {"db": "x", "mode": "slow", "extra_arg": ["--a", "--b"], "quiet": True, "limit": 3, "file_mode": "640"}
    assert options_from_values(Toy, values) == from_flags
    unset = options_from_values(Toy, {"db": "x", "mode": "fast", "quiet": False, "file_mode": "600"}, constant=1.0)
    assert (unset.extra, unset.limit, unset.constant) == ((), None, 1.0)

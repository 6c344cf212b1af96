"""A server process's options, declared once: a frozen dataclass whose fields are its command's options.

A field made with `option()` is one option of the command: its flag (`--` and the field's key with dashes), its
YAML key in `configs/` (where its default is written, the only place), its type and choices (from the annotation),
and its help (the field's docstring) all come from that one field. `add_options` adds the flags to a parser,
`options_from_args` builds the dataclass from the parsed flags, and `options_from_values` from a mapping of YAML
keys (the shipped file, when a process is built in code). TRL's `HfArgumentParser` does the same for its configs.

What an annotation gives a flag: `bool` a switch (`store_true`), `tuple[str, ...]` a repeatable flag (`append`),
`Literal[...]` its choices, `Optional[X]` the type X, `int`/`float`/`str` that type; `option(parse=...)` overrides
the type (an octal file mode).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Optional, TypeVar, Union

S = TypeVar("S")
"""An options dataclass."""

OPTION = "ajet_option"
"""The metadata key under which a field carries its `Option`."""


@dataclass(frozen=True)
class Option:
    """How one options field is offered on the command line and in `configs/`."""

    key: Optional[str] = None
    """The YAML key and argparse dest (None: the field's name)."""
    parse: Optional[Callable[[str], object]] = None
    """Turns the flag's text into the value (None: the annotation's type)."""
    metavar: Optional[str] = None
    """What `--help` shows for the value."""


def option(
    key: Optional[str] = None, parse: Optional[Callable[[str], object]] = None, metavar: Optional[str] = None
) -> Any:  # what `dataclasses.field` gives: it stands for the field's value in the class body
    """A options field that is an option of the command, with no default of its own (`configs/` holds it)."""
    return dataclasses.field(metadata={OPTION: Option(key, parse, metavar)})


@dataclass(frozen=True)
class Declared:
    """One option as a parser and a config file see it."""

    field: str
    """The options field."""
    key: str
    """The YAML key and argparse dest."""
    kind: object
    """The field's annotation, resolved."""
    spec: Option
    """The field's `Option`."""
    doc: str
    """The field's docstring, folded to one paragraph."""

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


def declared(cls: type) -> list[Declared]:
    """The options of an options dataclass, in field order."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(OPTION)
        if isinstance(spec, Option):
            out.append(Declared(f.name, spec.key or f.name, hints[f.name], spec, docs.get(f.name, "")))
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string under its annotation), from the class and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _unwrapped(kind: object) -> object:
    """`Optional[X]` -> X."""
    if typing.get_origin(kind) is Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0] if len(args) == 1 else kind
    return kind


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    skip: tuple[str, ...] = (),
    flags: Optional[Mapping[str, tuple[str, ...]]] = None,
) -> None:
    """The options as flags of `parser`, without defaults (`ajet_core.flags.apply_defaults` sets them from
    `configs/`); `skip`: keys another builder declares; `flags`: other flag names for some keys (the dest stays the
    key)."""
    for d in declared(cls):
        if d.key not in skip:
            names = (flags or {}).get(d.key, (d.flag,))
            parser.add_argument(*names, dest=d.key, help=d.doc.replace("%", "%%"), **_how(d))


def _how(d: Declared) -> dict[str, Any]:
    """argparse's arguments for one option's kind of value."""
    kind = _unwrapped(d.kind)
    if kind is bool:
        return {"action": "store_true"}
    if typing.get_origin(kind) is tuple:
        return {"action": "append", "metavar": d.spec.metavar or "ARG"}
    if typing.get_origin(kind) is Literal:
        return {"choices": list(typing.get_args(kind))}
    convert = d.spec.parse or (kind if kind in (int, float) else None)
    return {"type": convert, "metavar": d.spec.metavar}


def _value(d: Declared, raw: object) -> object:
    """A parsed flag's or a YAML file's value as the field's type."""
    kind = _unwrapped(d.kind)
    if raw is None:
        return () if typing.get_origin(kind) is tuple else None
    if typing.get_origin(kind) is tuple:
        return tuple(str(item) for item in (raw if isinstance(raw, (list, tuple)) else [raw]))
    if d.spec.parse is not None:
        return d.spec.parse(str(raw))  # a parsed value writes back as its flag's text (`FileMode`: "600")
    if kind is int:
        return int(str(raw))
    if kind is float:
        return float(str(raw))
    return raw


def options_from_values(cls: type[S], values: Mapping[str, object], **overrides: object) -> S:
    """The options from a mapping of option keys (parsed flags, or a config file's values), `overrides` (field
    names) on top; a field that is no option keeps its own default."""
    fields = {d.field: _value(d, values.get(d.key)) for d in declared(cls)}
    return cls(**{**fields, **overrides})


def options_from_args(cls: type[S], args: argparse.Namespace, **overrides: object) -> S:
    """The options from a command line `add_options` built."""
    return options_from_values(cls, vars(args), **overrides)

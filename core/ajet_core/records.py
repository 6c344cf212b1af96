"""One record made from another that describes the same thing: the fields they share by name are carried over, so
no conversion copies them by hand (`uuid=row.uuid, client_id=row.client_id, ...`), and a field added to both travels
without another line.

A name means one thing everywhere (docs/design.md's glossary), which is what makes carrying by name safe: a field
the source lacks is left to the target's default, or given; a required one neither has fails at once.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from pydantic import BaseModel

R = TypeVar("R")
"""The record made."""


def field_names(record: type) -> list[str]:
    """The fields of a dataclass or a pydantic model, in order."""
    if issubclass(record, BaseModel):
        return list(record.model_fields)
    if dataclasses.is_dataclass(record):
        return [f.name for f in dataclasses.fields(record)]
    raise TypeError(f"{record.__name__} is neither a dataclass nor a pydantic model")


def carried(target: type[R], source: object, **given: object) -> R:
    """A `target` whose fields are `given`, then those of `source` of the same name."""
    names = [n for n in field_names(target) if n not in given and hasattr(source, n)]
    return target(**{n: getattr(source, n) for n in names}, **given)

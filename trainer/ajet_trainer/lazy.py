"""Lazy package exports (PEP 562): a package lists its public names and loads each on first use.

The trainer's packages use it so that importing them (for `ajet-trainer --help`, or the verl key mapping)
loads neither torch nor verl's Ray trainer until a name that needs them is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_getattr(package: str, exports: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], object]:
    """A module `__getattr__` that imports `exports[name]` on first use and caches the value in `namespace`."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    return __getattr__

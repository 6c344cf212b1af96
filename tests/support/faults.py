"""Timing and fault injection for tests and benchmarks, kept off the product: nothing in `ajet*` reads these.

A harness starts a trainer (or a whole `ajet-swarm`) with `update_delay_env(seconds)` in its environment.
That puts `tests/support/inject/` first on PYTHONPATH, whose `sitecustomize.py` Python loads at start-up; it
wraps `Learner.update` so that each training update first sleeps: a large model's update (the async
benchmark), or a window in which a test kills the trainer mid-update. The proxy, which never imports the
learner, is untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).resolve().parent / "inject"
UPDATE_DELAY_VAR = "AJET_TEST_UPDATE_DELAY_S"
"""Seconds each training update sleeps first, in a process started with `update_delay_env`."""

TARGET = "ajet_trainer.learner"


def update_delay_env(seconds: float) -> dict[str, str]:
    """Environment entries that make every training update of the started process sleep `seconds` first."""
    path = os.pathsep.join([str(INJECT), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {UPDATE_DELAY_VAR: str(seconds), "PYTHONPATH": path}


def delay_updates(module: ModuleType, seconds: float) -> None:
    """Make `module.Learner.update` sleep `seconds` before it updates."""
    learner = module.Learner
    update = learner.update

    def slow_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        logging.getLogger("tests.support.faults").warning("injected: sleeping %.1fs inside the update", seconds)
        time.sleep(seconds)
        return update(self, *args, **kwargs)

    learner.update = slow_update


class _PatchingLoader(importlib.abc.Loader):
    """The learner module's own loader, then `delay_updates` on what it loaded."""

    def __init__(self, inner: importlib.abc.Loader, seconds: float):
        self.inner, self.seconds = inner, seconds

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        delay_updates(module, self.seconds)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Hands the learner module to `_PatchingLoader` when it is imported (so nothing is imported early)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def find_spec(
        self, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and isinstance(spec.loader, importlib.abc.Loader):
            spec.loader = _PatchingLoader(spec.loader, self.seconds)
        return spec


def install_from_env() -> None:
    """What `inject/sitecustomize.py` calls: install the delay when the environment asks for one."""
    seconds = float(os.environ.get(UPDATE_DELAY_VAR, "0") or 0)
    if seconds > 0:
        sys.meta_path.insert(0, _AfterImport(seconds))

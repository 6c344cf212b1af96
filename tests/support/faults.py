"""Timing and fault injection for tests and benchmarks, kept off the product: nothing in `ajet*` reads these.

A harness starts a trainer (or a whole `ajet-swarm`) with `update_delay_env(seconds)` in its environment.
That puts `tests/support/inject/` first on PYTHONPATH, whose `sitecustomize.py` Python loads at start-up; it
wraps `Learner.update` so that each training update first sleeps: a large model's update (the async
benchmark), or a window in which a test kills the trainer mid-update. The proxy, which never imports the
learner, is untouched. `scripted_policy_env(path)` likewise makes the trainer's embedded engine answer with the
scripts a test writes to `path` (`tests.support.scripted_model.FileScriptedModel`); the trainer trains the model
itself.
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
from typing import Any, Callable, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).resolve().parent / "inject"
UPDATE_DELAY_VAR = "AJET_TEST_UPDATE_DELAY_S"
"""Seconds each training update sleeps first, in a process started with `update_delay_env`."""
UPDATE_GATE_VAR = "AJET_TEST_UPDATE_GATE"
"""A file each training update waits on while it exists, in a process started with `update_gate_env`: a test holds
an update open for as long as it needs, then deletes the file (no timing window)."""
GATE_HELD = "injected: the update waits at its gate"
"""What a gated update logs once it is inside `Learner.update`, waiting (a test reads it from the trainer's log)."""
GATE_MAX_S = 600.0
"""The longest an update waits on its gate (a test that never opens it fails by its own timeout, not this)."""

TARGET = "ajet_trainer.embedded.learner"
POLICY_SCRIPT_VAR = "AJET_TEST_POLICY_SCRIPT"
"""A JSON file of scripts the embedded engine of a process started with `scripted_policy_env` answers with."""
ENGINE = "ajet_trainer.embedded.server"


def _inject_path() -> str:
    return os.pathsep.join([str(INJECT), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def update_delay_env(seconds: float) -> dict[str, str]:
    """Environment entries that make every training update of the started process sleep `seconds` first."""
    return {UPDATE_DELAY_VAR: str(seconds), "PYTHONPATH": _inject_path()}


def update_gate_env(gate: Path) -> dict[str, str]:
    """Environment entries that make every training update of the started process wait while `gate` exists."""
    return {UPDATE_GATE_VAR: str(gate), "PYTHONPATH": _inject_path()}


def scripted_policy_env(path: Path) -> dict[str, str]:
    """Environment entries that make the started process's embedded engine answer with the scripts in `path`."""
    return {POLICY_SCRIPT_VAR: str(path), "PYTHONPATH": _inject_path()}


def script_engine(module: ModuleType, path: str) -> None:
    """Make every `module.EmbeddedEngine` serve its model wrapped in a `FileScriptedModel` of `path`, its prefix cache
    off: a scripted model tells a new request by its prefill of more than one token, which a call whose whole prompt
    was kept (an episode's first call again) does not make."""
    from tests.support.scripted_model import FileScriptedModel

    engine = module.EmbeddedEngine
    init = engine.__init__

    def scripted_init(self: Any, model: Any, *args: Any, **kwargs: Any) -> None:
        init(self, FileScriptedModel(model, path), *args, **{**kwargs, "prefix_cache_bytes": 0})

    engine.__init__ = scripted_init


def delay_updates(module: ModuleType, seconds: float, gate: Optional[str] = None) -> None:
    """Make `module.Learner.update` sleep `seconds`, then wait while the file `gate` exists, before it updates."""
    learner = module.Learner
    update = learner.update

    def slow_update(self: Any, *args: Any, **kwargs: Any) -> Any:
        log = logging.getLogger("tests.support.faults")
        if seconds > 0:
            log.warning("injected: sleeping %.1fs inside the update", seconds)
            time.sleep(seconds)
        deadline = time.monotonic() + GATE_MAX_S
        if gate is not None and os.path.exists(gate):
            log.warning("%s %s", GATE_HELD, gate)
        while gate is not None and os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        return update(self, *args, **kwargs)

    learner.update = slow_update


class _PatchingLoader(importlib.abc.Loader):
    """A module's own loader, then `patch` on what it loaded."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], None]):
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Hands module `target` to `_PatchingLoader` when it is imported (so nothing is imported early)."""

    def __init__(self, target: str, patch: Callable[[ModuleType], None]):
        self.target, self.patch = target, patch

    def find_spec(
        self, name: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and isinstance(spec.loader, importlib.abc.Loader):
            spec.loader = _PatchingLoader(spec.loader, self.patch)
        return spec


def install_from_env() -> None:
    """What `inject/sitecustomize.py` calls: install the delay and the scripted policy the environment asks for."""
    seconds = float(os.environ.get(UPDATE_DELAY_VAR, "0") or 0)
    gate = os.environ.get(UPDATE_GATE_VAR) or None
    if seconds > 0 or gate is not None:
        sys.meta_path.insert(0, _AfterImport(TARGET, lambda module: delay_updates(module, seconds, gate)))
    script = os.environ.get(POLICY_SCRIPT_VAR)
    if script:
        sys.meta_path.insert(0, _AfterImport(ENGINE, lambda module: script_engine(module, script)))

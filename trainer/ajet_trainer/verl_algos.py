"""verl's algorithm modules, importable where Ray is not installed.

verl's package imports Ray when it is imported (`verl/__init__.py` -> `verl/protocol.py`, for one annotation,
`list[ray.ObjectRef]`), though none of the functions the embedded trainer calls (GRPO advantages, the policy loss, the
KL penalty, the rollout correction) touches Ray. Every venv `make setup` builds has Ray, and there this module is a
plain import. A bare GPU box has none and cannot take it along (Ray's wheel alone is over the 64 MiB a device run
carries): there verl is imported with `RayAbsent`, a placeholder module, in `sys.modules["ray"]` for that import only.
It is removed at once, so any later `import ray` fails as it would have; verl code that does reach Ray through the
name it kept raises `RayNotInstalled`, naming the install line. docs/testing.md names this stand-in.
"""

from __future__ import annotations

import importlib
import sys
import types

from ajet_trainer.errors import TrainerError


class RayNotInstalled(TrainerError):
    """verl code that needs Ray ran on a machine without Ray (only its algorithms, imported here, work there)."""


class RayAbsent(types.ModuleType):
    """What verl's modules see as `ray` while they are imported on a machine without Ray: the one name they read at
    import time (`ObjectRef`, for an annotation) is a bare class; any other attribute raises `RayNotInstalled`."""

    def __init__(self) -> None:
        super().__init__("ray", "Placeholder: Ray is not installed on this machine (ajet_trainer.verl_algos).")
        self.ObjectRef = type("ObjectRef", (), {"__module__": "ray"})

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # import machinery and introspection probe dunders: answer as a plain module
            raise AttributeError(name)
        raise RayNotInstalled(f"ray.{name}: Ray is not installed here (pip install 'agentjet-swarm-server[verl]')")


def ray_installed() -> bool:
    """Whether `import ray` works here (a module that raises ImportError, as on a box without it, counts as no)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def verl_module(name: str) -> types.ModuleType:
    """Import verl's module `name` (`verl.trainer.ppo.core_algos`), with `RayAbsent` standing in for Ray during the
    import where Ray is not installed."""
    if ray_installed():
        return importlib.import_module(name)
    sys.modules["ray"] = RayAbsent()
    try:
        return importlib.import_module(name)
    finally:
        del sys.modules["ray"]

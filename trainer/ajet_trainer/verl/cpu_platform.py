"""A CPU platform for verl: verl's own workers (FSDP engine, actor, checkpoints) on CPU over gloo.

verl 0.9 picks its device through a platform registry (`verl/plugin/platform/platform_manager.py`):
cuda, npu and rocm ship. This module registers `cpu` through verl's own hook, the
`PlatformRegistry.register` decorator, so importing it (directly, or by naming it in
`VERL_USE_EXTERNAL_MODULES`, which `verl/__init__.py` imports in every process, Ray workers included)
and setting `VERL_PLATFORM=cpu` is all verl needs to place its workers on CPU:

- device `cpu` (`torch.device("cpu")` where verl asks for a device index), `torch.cpu` with the memory
  and RNG calls verl makes of a device module, collective backend `gloo`;
- Ray resource `CPU`: a worker asks Ray for CPUs, not GPUs (`ray_resource_options`);
- no IPC weight sharing, no profiler, no CUDA runtime.

`use_cpu_platform()` does both for this process and the Ray workers it starts (they inherit the
environment through the runtime env). The places where verl still assumes an accelerator past the
platform are patched below (`_patch_*`), one function each, with verl's file and line; they apply once
`VERL_PLATFORM=cpu` is set, and each asks the current platform, so a process that goes back to another
platform is unaffected.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry


class _CpuDeviceModule(ModuleType):
    """`torch.cpu` plus what verl asks of a `torch.<device>` module that `torch.cpu` lacks: the memory
    counters (no device memory: 0; `mem_get_info` is the host's), the RNG state and `empty_cache`."""

    def __init__(self) -> None:
        super().__init__("ajet_torch_cpu")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"


_DEVICE_MODULE = _CpuDeviceModule()

PLATFORM_NAME = "cpu"
"""The name verl's registry knows this platform by (`VERL_PLATFORM=cpu`)."""

PLATFORM_RESOURCE = "CPU"
"""The Ray resource a worker of this platform asks for."""

ENV = {"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": __name__}
"""What a process (a Ray worker) needs in its environment to come up on this platform."""


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU (one "device", gloo collectives, Ray CPUs)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # auto-detection must never prefer the CPU over an accelerator: only VERL_PLATFORM=cpu selects it
        return False

    def current_device(self) -> torch.device:  # type: ignore[override]
        # verl passes this as a device everywhere (`.to(get_device_id())`, `device=get_device_id()`,
        # verl/utils/fsdp_utils.py:507 among them); an int would mean "accelerator 0" to torch
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # verl reads and sets this for its workers; a name no library acts on keeps it harmless
        return "AJET_VERL_CPU_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return PLATFORM_RESOURCE

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def use_cpu_platform() -> None:
    """Select this platform in this process (and in every process that inherits its environment: the Ray
    workers this process starts), with its patches."""
    from verl.plugin.platform import get_platform, set_platform

    os.environ.update(ENV)
    if get_platform().device_name != PLATFORM_NAME:  # something asked verl for its device before us
        set_platform(PlatformCPU())
    _apply_patches()


# ---------------------------------------------------------------------------------------------- patches
def _patch_process_group() -> None:
    """verl/utils/distributed.py:89 (`initialize_global_process_group_ray`) builds the backend string
    "cpu:gloo,<device>:<backend>"; with device cpu that is "cpu:gloo,cpu:gloo", which torch refuses
    ("Duplicate device type cpu"). A fix in verl itself: skip the second entry when the device is the CPU."""
    import verl.checkpoint_engine.base as ckpt_base
    import verl.workers.engine_workers as engine_workers
    from verl.utils import distributed

    original = distributed.initialize_global_process_group_ray

    def initialize(timeout_second: Optional[int] = None, backend: Optional[str] = None) -> None:
        if backend is None and distributed.get_device_name() == PLATFORM_NAME:
            backend = "cpu:gloo"
        original(timeout_second=timeout_second, backend=backend)

    for module in (distributed, engine_workers, ckpt_base):
        module.initialize_global_process_group_ray = initialize


def _register_engines() -> None:
    """verl/workers/engine/fsdp/transformer_impl.py:1143 and :1594 register verl's FSDP engines for
    devices cuda and npu only; the engine itself goes through the platform. Registered for cpu with
    verl's own `EngineRegistry.register` (in verl itself: add "cpu" to those two lists)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if PLATFORM_NAME not in EngineRegistry._engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM_NAME)(engine)


def _patch_trl_value_head() -> None:
    """verl/models/transformers/monkey_patch.py:352 patches trl's `AutoModelForCausalLMWithValueHead`
    whenever trl imports, but trl >= 1.0 has no such class (neither in `trl` nor `trl.experimental.ppo`),
    so every model build fails with an ImportError (on any device). verl only needs it for value-head
    models trl built: with no such class there is nothing to patch (in verl itself: guard the import)."""
    import importlib

    from verl.models.transformers import monkey_patch

    def has_value_head() -> bool:
        for name in ("trl.experimental.ppo", "trl"):
            try:
                if hasattr(importlib.import_module(name), "AutoModelForCausalLMWithValueHead"):
                    return True
            except ImportError:
                continue
        return False

    monkey_patch.is_trl_available = has_value_head


def _patch_resource_check() -> None:
    """verl/single_controller/ray/base.py:228 (`ResourcePoolManager._check_resource_available`) counts the
    cluster's "GPU" (or "NPU") resources whatever the platform's `ray_resource_name()` says, so a pool of
    CPU workers is refused ("Total available GPUs 0 is less than total desired GPUs 1"). Counted here in
    the platform's resource (in verl itself: use `get_platform().ray_resource_name()` there)."""
    import ray
    from verl.plugin.platform import get_platform
    from verl.single_controller.ray.base import ResourcePoolManager

    original = ResourcePoolManager._check_resource_available

    def check(self: ResourcePoolManager) -> None:
        resource = get_platform().ray_resource_name()
        if resource != PLATFORM_RESOURCE:
            return original(self)
        nodes = ray._private.state.available_resources_per_node().values()
        have = sum(node.get(resource, 0) for node in nodes)
        want = sum(n for nodes in self.resource_pool_spec.values() for n in nodes)
        if have < want:
            raise ValueError(f"Total available CPUs {have} is less than total desired CPU workers {want}")

    ResourcePoolManager._check_resource_available = check


_applied = False


def _apply_patches() -> None:
    """The patches below, once per process; the CPU ones only while `VERL_PLATFORM=cpu`."""
    global _applied
    if _applied:
        return
    _patch_trl_value_head()  # a version mismatch, not a device one: needed on GPUs as well
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != PLATFORM_NAME:
        return
    _patch_process_group()
    _register_engines()
    _patch_resource_check()
    _applied = True


_apply_patches()

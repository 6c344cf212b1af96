"""The backend factory: the one place that picks a `TrainingSession` implementation (`interfaces.py`), and the
`Engines` one (`start_engines`, handed to the session it opens: no implementation imports the factory).

`embedded` trains in this process with PyTorch and serves with the engine `--engine` names; `verl`
trains with verl's workers on Ray, either beside the engine `--engine` names (embedded or vllm: verl's
actor only, its weights pulled into that engine after each step; on CPU too) or `--engine hybrid`
(verl launches and syncs its own vLLM engines, GPU clusters). `auto` (the command's default) picks
verl + vLLM where CUDA, verl and vLLM are present, else the embedded trainer (`choose_backend`). The
verl backend is imported only when chosen: it loads verl's Ray trainer, which the embedded path does
not need.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ajet.job import AgentJetJob
from ajet_store import Store
from ajet_store.placement import DEFAULT_SLUG
from ajet_trainer.errors import TrainerError
from ajet_trainer.interfaces import Engines, TrainingSession
from ajet_trainer.options import BackendKind, EngineKind, TrainerOptions
from ajet_trainer.registries import Shared
from ajet_trainer.types import ServedWeights

logger = logging.getLogger(__name__)


def preload_embedded() -> None:
    """Import what the embedded backend's first boot needs (torch, transformers, verl's algorithms: seconds)."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        import ajet_trainer.embedded.session  # noqa: F401
    except Exception:  # noqa: BLE001 - the boot imports them again and reports a failure where clients see it
        logger.debug("preloading the embedded backend failed", exc_info=True)


def trains_alone(opts: TrainerOptions) -> Optional[str]:
    """Why a trainer with `opts` trains one experiment only, None when it trains several (the embedded backend: LoRA
    experiments share one base and engine, or one launch of vLLM servers). Imports torch only where `auto` could pick
    verl (verl and vLLM both installed: it asks whether CUDA is there), so a trainer can say it at start."""
    backend = opts.backend
    if backend == "auto":
        maybe_verl = importlib.util.find_spec("verl") is not None and importlib.util.find_spec("vllm") is not None
        backend = resolve_options(opts)[0].backend if maybe_verl else "embedded"
    if backend == "verl":
        return "its trainer runs --backend verl, which trains one adapter (verl #7909)"
    if opts.engine == "vllm" and opts.vllm_sleep:
        return "its trainer runs vLLM with --vllm-sleep, which sleeps the server at each update: every call would wait"
    if opts.engine == "vllm" and opts.vllm_max_experiments < 2:
        return "its trainer runs vLLM with --vllm-max-experiments 1: the server holds one experiment's adapters"
    return None


def choose_backend(cuda: bool, has_verl: bool, has_vllm: bool) -> tuple[BackendKind, str]:
    """`--backend auto`: verl (FSDP workers, vLLM engines) when it can run here, else embedded; and why."""
    missing = [what for what, ok in (("a CUDA device", cuda), ("verl", has_verl), ("vLLM", has_vllm)) if not ok]
    if not missing:
        return "verl", "CUDA, verl and vLLM are present"
    return "embedded", f"missing here: {', '.join(missing)} (the verl backend needs all three)"


@dataclass(frozen=True)
class Machine:
    """What the backend and engine choice depends on in the machine the trainer runs on."""

    cuda: bool
    """A CUDA device is visible to torch."""
    has_verl: bool
    """verl is importable."""
    has_vllm: bool
    """vLLM is importable (the verl backend's vLLM engines)."""


def detect_machine() -> Machine:
    """This machine's `Machine`."""
    import torch

    def has(module: str) -> bool:
        return importlib.util.find_spec(module) is not None

    return Machine(torch.cuda.is_available(), has("verl"), has("vllm"))


def resolve_options(opts: TrainerOptions) -> tuple[TrainerOptions, str]:
    """`opts` with `--backend auto` and `--engine auto` made concrete for this machine (`detect_machine`), and
    why that backend (`TrainerError` for a combination that cannot run: `resolve_engine`)."""
    machine = detect_machine()
    why = f"--backend {opts.backend}"
    if opts.backend == "auto":
        backend, why = choose_backend(machine.cuda, machine.has_verl, machine.has_vllm)
        opts = replace(opts, backend=backend)
    return replace(opts, engine=resolve_engine(opts.backend, opts.engine, machine.cuda)), why


def resolve_engine(backend: BackendKind, engine: EngineKind, cuda: bool) -> EngineKind:
    """`--engine auto`: the embedded engine, except verl on CUDA, where verl's own vLLM engines serve (hybrid).
    `TrainerError` for hybrid without the verl backend."""
    if engine == "auto":
        return "hybrid" if backend == "verl" and cuda else "embedded"
    if engine == "hybrid" and backend != "verl":
        raise TrainerError("--engine hybrid (verl's own vLLM engines) needs --backend verl")
    return engine


def refuse_unsupported_async(job: AgentJetJob, opts: TrainerOptions) -> None:
    """Asynchronous training (`max_staleness >= 1`), partial rollouts and replay need the embedded backend, with
    either engine; on vLLM an asynchronous job serves each step's LoRA adapter under a name of its own (calls in flight
    finish on the one they began with), or, with partial rollouts, loads the weights in place across a pause that
    keeps each token's version. `TrainerError` naming what to change otherwise, before any model is loaded."""
    if job.replay is not None and opts.backend != "embedded":
        raise TrainerError(f"a replay job runs on the embedded backend only so far, not --backend {opts.backend}")
    where = f"--backend {opts.backend} --engine {opts.engine}"
    if job.max_staleness > 0 and opts.backend != "embedded":
        raise TrainerError(
            f"max_staleness={job.max_staleness} (asynchronous training) runs on the embedded backend (with the "
            f"embedded engine or vLLM) only so far: verl's trainer steps synchronously; with {where} use "
            "max_staleness=0"
        )
    if job.max_staleness > 0 and opts.engine == "vllm" and not (job.uses_lora or job.partial_rollouts):
        raise TrainerError(
            f"max_staleness={job.max_staleness} with full fine-tuning on vLLM would reload the weights under calls "
            "in flight: train a LoRA adapter (lora_rank > 0), or set partial_rollouts=True (the weights are then "
            "loaded in place across a pause that keeps each token's version)"
        )
    if job.partial_rollouts and opts.backend != "embedded":
        raise TrainerError(
            f"partial_rollouts runs on the embedded backend (with the embedded engine or vLLM) only so far; with "
            f"{where} use partial_rollouts=False"
        )


def open_session(
    job: AgentJetJob, run_id: int, store: Store, opts: TrainerOptions, shared: Optional[Shared] = None
) -> TrainingSession:
    """Open the session of `job` on the backend `opts.backend` names (`auto`: `resolve_options`, logged with why;
    `TrainerError` for an unknown one, or for asynchronous training where it cannot run). `shared`: the trainer's
    registries and the experiment's slug, where a LoRA job attaches to a shared base or vLLM server."""
    opts, why = resolve_options(opts)
    logger.info("backend %s, engine %s (%s)", opts.backend, opts.engine, why)
    refuse_unsupported_async(job, opts)
    if opts.backend == "embedded":
        from ajet_trainer.embedded.session import open_embedded_session

        return open_embedded_session(job, run_id, store, opts, start_engines, shared)
    if opts.backend == "verl":
        from ajet_trainer.verl.session import open_verl_session

        return open_verl_session(job, run_id, store, opts, start_engines)
    raise TrainerError(f"unknown backend '{opts.backend}'")


def start_engines(
    opts: TrainerOptions, job: AgentJetJob, weights: ServedWeights, exp_dir: Path, shared: Optional[Shared]
) -> Engines:
    """The engines `--engine` names (embedded or vllm), serving `weights` (`shared`: the trainer's registries, where
    vLLM servers are shared between experiments; None: this experiment's own)."""
    if opts.engine == "embedded":
        from ajet_trainer.embedded.engines import start_embedded_engines

        return start_embedded_engines(job, weights.model, weights.tokenizer, weights.step, opts)
    if opts.engine == "vllm":
        from ajet_trainer.vllm.engines import start_vllm_engines

        launches, slug = (shared.launches, shared.slug) if shared else (None, DEFAULT_SLUG)
        return start_vllm_engines(opts, job, weights.path, weights.model, exp_dir, weights.step, launches, slug)
    raise TrainerError(f"--engine {opts.engine} is not an engine the trainer serves from (embedded or vllm)")

"""Which settings of two jobs must agree for them to run on one swarm, and how two jobs differ.

A swarm serves one base model from its engines. What an engine is launched with, or what every adapter on one base
must have in common, is shared by every job on the swarm (`SHARED`); the rest belongs to a job alone. A job names
its experiment (`experiment_of`); a job of a new name runs beside the others as an experiment of its own when what
is shared agrees (`beside_conflict`); a job of a running experiment's name that differs from its job gets a 409
naming the fields, never a silent join (`JobConflict`, `job_conflict`).
"""

from __future__ import annotations

from typing import Optional

from ajet.errors import JobConflict
from ajet.job import AgentJetJob

SHARED: dict[str, str] = {
    "model": "the base model every engine serves",
    "max_model_len": "the context length the engines are launched with",
    "max_response_length_in_one_turn": "vLLM's server-wide answer cap (`--override-generation-config`)",
    "lora_target_modules": "the layers vLLM's LoRA slots hold, one set per engine",
    "gpu_memory_utilization": "the engines' share of the device",
}
"""Settings every job on one swarm shares, with why. With vLLM the LoRA rank is shared too (it sizes the engine's
slots: `--max-lora-rank`), and full fine-tuning (`lora_rank=0`) owns the whole model: one job per swarm."""


def experiment_of(job: AgentJetJob) -> str:
    """The experiment a job names (`project_name/experiment_name`): jobs of one name are one experiment."""
    return f"{job.project_name}/{job.experiment_name}"


def beside_conflict(
    running: AgentJetJob, other: AgentJetJob, trainer_alone: Optional[str] = None
) -> Optional[JobConflict]:
    """Why `other` cannot run beside `running` as an experiment of its own (None when it can): what the swarm shares
    differs, either job fine-tunes the whole model (which owns the box), or the swarm's trainer trains one experiment
    only (`trainer_alone`, its reason)."""
    shared = [f for f in job_differences(running, other) if f in SHARED]
    full = [experiment_of(j) for j in (running, other) if not j.uses_lora]
    if not shared and not full and trainer_alone is None:
        return None
    parts = []
    if shared:
        named = ", ".join(f"{f} ({SHARED[f]})" for f in shared)
        parts.append(f"it differs in what every experiment on a swarm shares: {named}")
    if full:
        whole = ", ".join(full)
        parts.append(f"full fine-tuning (lora_rank=0: {whole}) owns the whole model, one experiment per swarm")
    if trainer_alone is not None:
        parts.append(trainer_alone)
    return JobConflict(
        f"{experiment_of(other)} cannot run beside {experiment_of(running)} on this swarm: " + "; ".join(parts)
    )


def job_differences(running: AgentJetJob, other: AgentJetJob) -> list[str]:
    """The fields whose values differ between two jobs, in the model's field order."""
    a, b = running.model_dump(), other.model_dump()
    return [name for name in AgentJetJob.model_fields if a.get(name) != b.get(name)]


def job_conflict(running: AgentJetJob, other: AgentJetJob) -> Optional[JobConflict]:
    """The 409 for a client whose job is not the running one (None when they are equal): which fields differ,
    those the swarm shares named first."""
    differ = job_differences(running, other)
    if not differ:
        return None
    shared = [f for f in differ if f in SHARED]
    own = [f for f in differ if f not in SHARED]
    parts = []
    if shared:
        parts.append("shared by every job on this swarm: " + ", ".join(f"{f} ({SHARED[f]})" for f in shared))
    if own:
        parts.append("the job's own: " + ", ".join(own))
    return JobConflict(
        f"the swarm trains {running.project_name}/{running.experiment_name}, and this job differs from it in "
        + "; ".join(parts)
        + ". Sync the running job to join it, pass force_restart=True to replace it, or give the job another "
        "experiment_name to run it beside as an experiment of its own"
    )

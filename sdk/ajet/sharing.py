"""Which settings of two jobs must agree for them to run on one swarm, and how two jobs differ.

A swarm serves one base model from its engines. What an engine is launched with, or what every adapter on one base
must have in common, is shared by every job on the swarm (`SHARED`); the rest belongs to a job alone. Today a swarm
trains one job at a time: a client whose job differs from the running one gets a 409 naming the fields, never a
silent join (`JobConflict`, `job_conflict`).
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
        + ". This swarm trains one job at a time: sync the running job to join it, or pass force_restart=True to "
        "replace it"
    )

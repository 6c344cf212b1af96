"""The behaviour-policy correction: when a step trains tokens the engine sampled from other weights than the ones
it updates (an asynchronous job's lag, a synchronous job's leftovers, an engine with other numerics), each token's
policy loss is weighted by min(pi_trainer / pi_engine, cap), truncated importance sampling against the log-probs
the proxy logged (verl's token-level rollout correction). This module says which cap a job's steps use."""

from __future__ import annotations

from typing import Optional

from ajet.job import AgentJetJob

ASYNC_TIS_CAP = 2.0
"""The truncated importance-sampling cap of a job that needs a correction and sets none (verl's usual threshold)."""


def tis_cap(job: AgentJetJob, lagged: bool = False) -> Optional[float]:
    """The cap of one step's correction: the job's, else `ASYNC_TIS_CAP` when it trains asynchronously, replays
    stored episodes (another policy sampled them all), or the batch holds a synchronous job's leftovers (`lagged`:
    data of older policies), else None (off)."""
    if job.tis_cap is not None:
        return job.tis_cap
    return ASYNC_TIS_CAP if job.max_staleness > 0 or lagged or job.replay is not None else None


def run_tis_cap(job: AgentJetJob) -> Optional[float]:
    """The cap of an implementation that sets its correction once per run (verl): on for every step whenever some
    step may hold leftovers to correct (`leftovers: correct`, the default), since it cannot be turned on for just
    those steps. On-policy tokens weigh about 1 (pi_trainer and pi_engine agree up to the engine's numerics)."""
    return tis_cap(job, lagged=job.leftovers == "correct")

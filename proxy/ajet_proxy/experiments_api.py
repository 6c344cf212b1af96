"""The control API's experiment routes: sync a job, start and stop its experiment, list the swarm's experiments and
stop them all. A sync acts on the experiment its job names (`Proxy.host_for_job`); start and stop on the one the call
names (`X-Ajet-Experiment`, else the first); `stop_swarm` on every one. Same conventions as `control.py`."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time

from fastapi import APIRouter, Request
from pydantic import ValidationError

from ajet.errors import InvalidRequest
from ajet.job import TRACKERS, AgentJetJob
from ajet.sharing import experiment_of, job_conflict
from ajet.types import (
    AutoSyncRequest,
    ExperimentList,
    ExperimentState,
    OkResponse,
    SwarmExperiment,
    SyncTrainConfigRequest,
)
from ajet_proxy.api_docs import CONTROL_ERRORS
from ajet_proxy.config import ProxyConfig
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.route_context import host_of, proxy_of
from ajet_proxy.stats import experiment_status, template_verdict
from ajet_store.placement import DEFAULT_SLUG

router = APIRouter(prefix="/swarm", tags=["control"], responses=CONTROL_ERRORS)


def _validate_job(job: dict, config: ProxyConfig) -> AgentJetJob:
    try:
        parsed = AgentJetJob.from_wire(job)  # the client merged its base YAML; its path may not exist here
    except ValidationError as exc:
        fields = ["job." + ".".join(str(p) for p in err["loc"]) for err in exc.errors()]
        raise InvalidRequest(f"invalid job: {exc.errors()[0]['msg']} ({', '.join(fields)})", fields=fields) from exc
    _check_trackers(parsed)
    if os.path.isabs(parsed.experiment_dir) and not config.allow_absolute_experiment_dir:
        raise InvalidRequest(
            f"invalid job: experiment_dir {parsed.experiment_dir!r} is an absolute path; a job's folders stay under "
            "the trainer's experiments/ (a relative experiment_dir lands there) unless the proxy runs with "
            "--allow-absolute-experiment-dir",
            fields=["job.experiment_dir"],
        )
    return parsed


def _check_trackers(job: AgentJetJob) -> None:
    """A logger whose package is not installed on the training box is refused now, not when training starts."""
    for name in job.logging:
        module = TRACKERS[name]
        if module is not None and importlib.util.find_spec(module) is None:
            raise InvalidRequest(
                f"invalid job: logger {name!r} needs the {module!r} package, which is not installed "
                f"on the training box (pip install {module})",
                fields=["job.logging"],
            )


def _ok(s: ExperimentHost) -> OkResponse:
    return OkResponse(state=s.refresh_experiment().state)


async def _synced(s: ExperimentHost) -> OkResponse:
    """The answer of a sync: the state, and the trainer's template preflight of the job's model (which agent shapes
    merge, which fall back and why), waited for up to `preflight_wait_s` while a trainer beats."""
    deadline = time.monotonic() + s.config.preflight_wait_s
    while True:
        row = await asyncio.to_thread(s.refresh_experiment)
        verdict = template_verdict(row)
        beats = row.trainer_heartbeat is not None and time.time() - row.trainer_heartbeat < s.store.trainer_timeout_s
        if verdict is not None or not beats or time.monotonic() >= deadline:
            return OkResponse(state=row.state, template=verdict)
        await asyncio.sleep(0.1)


@router.post("/sync_train_config", response_model=OkResponse)
async def sync_train_config(body: SyncTrainConfigRequest, request: Request) -> OkResponse:
    """Store the job (only while OFFLINE); the answer carries the trainer's template preflight of its model."""
    job = _validate_job(body.job, proxy_of(request).config)
    s = await asyncio.to_thread(proxy_of(request).host_for_job, job)
    await asyncio.to_thread(s.store.sync_job, job)
    return await _synced(s)


@router.post("/start_engine", response_model=OkResponse)
def start_engine(request: Request) -> OkResponse:
    """OFFLINE -> BOOTING; the trainer takes it from there."""
    s = host_of(request)
    s.store.start()
    return _ok(s)


@router.post("/stop_engine", response_model=OkResponse)
def stop_engine(request: Request) -> OkResponse:
    """Any state -> OFFLINE; open episodes are aborted and their keys stop working."""
    return _stop(host_of(request))


def _stop(s: ExperimentHost) -> OkResponse:
    """The experiment to OFFLINE: its calls flushed, its open episodes aborted."""
    s.writer.flush()
    s.store.transition(ExperimentState.OFFLINE)
    s.open_episodes.clear()
    return _ok(s)


@router.post("/auto_sync_train_config_and_start_engine", response_model=OkResponse)
async def auto_sync_train_config_and_start_engine(body: AutoSyncRequest, request: Request) -> OkResponse:
    """Sync + start when OFFLINE (or when forced); otherwise join the running job when it is the same job, else 409
    `JobConflict` naming the fields that differ. The answer carries the trainer's template preflight of the job's
    model."""
    job = _validate_job(body.job, proxy_of(request).config)
    s = await asyncio.to_thread(proxy_of(request).host_for_job, job, body.force_restart)
    if body.force_restart:
        await asyncio.to_thread(_stop, s)
    row, started = await asyncio.to_thread(s.store.sync_and_start, job)  # atomic: racing clients cannot both sync
    if not started and row.job is not None and experiment_of(row.job) != experiment_of(job):
        s = await asyncio.to_thread(proxy_of(request).host_for_job, job, body.force_restart)  # another's came first
        row, started = await asyncio.to_thread(s.store.sync_and_start, job)
    conflict = None if started or row.job is None else job_conflict(row.job, job)
    if conflict is not None:  # never a silent join to another job
        raise conflict
    return await _synced(s)


@router.get("/list_experiments", response_model=ExperimentList)
def list_experiments(request: Request) -> ExperimentList:
    """Every experiment of the swarm with its state: the default, then the others by name."""
    proxy = proxy_of(request)
    proxy.take_up_experiments()
    return _listed(list(proxy.hosts.values()))


@router.post("/stop_swarm", response_model=ExperimentList)
def stop_swarm(request: Request) -> ExperimentList:
    """Every experiment to OFFLINE, as `stop_engine` stops one: the whole swarm stops, explicitly."""
    proxy = proxy_of(request)
    proxy.take_up_experiments()
    hosts = list(proxy.hosts.values())
    for host in hosts:
        _stop(host)
    return _listed(hosts)


def _listed(hosts: list[ExperimentHost]) -> ExperimentList:
    now = time.time()
    out = []
    for host in hosts:
        row = host.refresh_experiment()
        name = None if row.job is None else experiment_of(row.job)
        default = host.slug == DEFAULT_SLUG
        out.append(
            SwarmExperiment(
                name=name,
                slug=host.slug,
                default=default,
                status=experiment_status(row, now, host.store.trainer_timeout_s),
            )
        )
    return ExperimentList(experiments=sorted(out, key=lambda e: (not e.default, e.name or "")))

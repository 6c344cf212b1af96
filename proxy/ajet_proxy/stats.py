"""Assembly of the rollout statistics (a pure function of what the store and registry hold)."""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from ajet.evaluation_types import EvaluationInfo
from ajet.job import AgentJetJob
from ajet.stat_types import (
    CallInfo,
    ClientInfo,
    EpisodeDetail,
    MissionStat,
    OpenEpisodeInfo,
    RolloutStat,
    StepInfo,
    TaskStat,
)
from ajet.template_verdict import TemplateVerdict
from ajet.types import ExperimentStatus
from ajet_core.records import carried
from ajet_proxy.open_episodes import OpenEpisode
from ajet_store.batch_policy import all_progress, group_by_task, is_dummy
from ajet_store.episodes import trainer_silence
from ajet_store.types import CallRecord, EpisodeRow, ExperimentRow, PoolEpisode

_DEFAULT_JOB = AgentJetJob()
"""Whose batch shape the statistics show before the first sync."""


def experiment_status(row: ExperimentRow, now: float, timeout_s: float) -> ExperimentStatus:
    """The experiment's row as the wire type."""
    return ExperimentStatus(
        state=row.state,
        state_seconds=max(0.0, now - row.state_since),
        global_step=row.global_step,
        policy_version=row.policy_version,
        job_synced=row.job is not None,
        experiment_name=None if row.job is None else row.job.experiment_name,
        last_error=row.last_error,
        last_error_age_s=None if row.last_error_at is None else max(0.0, now - row.last_error_at),
        boot_failed=row.boot_failed,
        updating=row.updating_since is not None,
        updating_seconds=None if row.updating_since is None else max(0.0, now - row.updating_since),
        trainer_silent_s=trainer_silence(row, now, timeout_s),
        trainer_timeout_s=timeout_s,
        trainer_stopped_s=None if row.trainer_stopped_at is None else max(0.0, now - row.trainer_stopped_at),
        template=template_verdict(row),
    )


def template_verdict(row: ExperimentRow) -> Optional[TemplateVerdict]:
    """The trainer's template preflight of the synced job's model (None before it ran, or for another model)."""
    verdict = row.template_verdict
    return verdict if verdict is not None and row.job is not None and verdict.model == row.job.model else None


def batch_shape(row: ExperimentRow) -> tuple[int, int]:
    """(batch_size, num_repeat) of the synced job, or the default job's."""
    job = row.job or _DEFAULT_JOB
    return job.batch_size, job.num_repeat


def mission_caps(row: ExperimentRow) -> dict[str, float]:
    """The synced job's mission mix (mission -> most share of a batch)."""
    return {} if row.job is None else dict(row.job.mission_mix)


def mission_stats(
    missions: Sequence[dict[str, Any]], pool: Sequence[PoolEpisode], caps: dict[str, float]
) -> list[MissionStat]:
    """Each mission's counts, with its cap and the episodes it has waiting in the pool."""
    pooled: dict[str, int] = {}
    for ep in pool:
        pooled[ep.mission or "-"] = pooled.get(ep.mission or "-", 0) + 1
    return [
        MissionStat(**m, pooled=pooled.get(m["mission"], 0), max_batch_share=caps.get(m["mission"])) for m in missions
    ]


def task_stats(pool: Sequence[PoolEpisode]) -> list[TaskStat]:
    """Per-task counts of the pool, in pool order."""
    return [
        TaskStat(task_id=tid, episodes=len(g), reward_mean=sum(e.reward for e in g) / len(g), dummy=is_dummy(g))
        for tid, g in group_by_task(pool).items()
    ]


def client_infos(clients: Sequence[dict[str, Any]], now: float) -> list[ClientInfo]:
    """The clients the store has seen, as the statistics show them."""
    return [
        ClientInfo(
            client_id=c["client_id"],
            last_seen_s=max(0.0, now - c["last_seen"]),
            begun=c["begun"],
            ended=c["ended"],
            aborted=c["aborted"],
        )  # fmt: skip
        for c in clients
    ]


def build_rollout_stat(
    row: ExperimentRow,
    pool: Sequence[PoolEpisode],
    live: Sequence[OpenEpisode],
    totals: dict[str, int],
    clients: Sequence[dict[str, Any]],
    steps: Sequence[StepInfo],
    now: float,
    timeout_s: float,
    missions: Sequence[dict[str, Any]] = (),
    last_evaluation: Optional[EvaluationInfo] = None,
) -> RolloutStat:
    """Everything `get_rollout_stat` answers (`timeout_s`: the store's `trainer_timeout_s`)."""
    batch_size, num_repeat = batch_shape(row)
    caps = mission_caps(row)
    open_eps = [
        OpenEpisodeInfo(
            episode_uuid=e.uuid,
            client_id=e.client_id,
            episode_type=e.episode_type,
            age_s=max(0.0, now - e.created_at),
            idle_s=e.idle(now),
            timeout_s=e.timeout_s,
            num_calls=e.next_seq,
        )
        for e in sorted(live, key=lambda e: e.created_at)
    ]
    return RolloutStat(
        experiment=experiment_status(row, now, timeout_s),
        batch_mode=row.batch_mode,
        batch_size=batch_size,
        num_repeat=num_repeat,
        progress=all_progress(pool, batch_size, num_repeat, caps),
        open_episodes=open_eps,
        tasks=task_stats(pool),
        clients=client_infos(clients, now),
        totals=totals,
        recent_steps=list(steps),
        missions=mission_stats(missions, pool, caps),
        last_evaluation=last_evaluation,
    )


def answer_text(response: str | None) -> str:
    """The text (and tool calls) of a logged answer."""
    if not response:
        return ""
    try:
        msg = (json.loads(response).get("choices") or [{}])[0].get("message") or {}
    except (ValueError, AttributeError):
        return response[:2000]
    text = msg.get("content") or ""
    if msg.get("tool_calls"):
        text += ("\n" if text else "") + json.dumps(msg["tool_calls"])
    return text


def request_messages(request: str) -> list[dict[str, Any]]:
    """The messages of a logged request body ([] if it is not a JSON object with messages)."""
    try:
        return json.loads(request).get("messages") or []
    except (ValueError, AttributeError):
        return []


def call_info(c: CallRecord) -> CallInfo:
    """A logged call as the wire type."""
    return carried(
        CallInfo,
        c,
        messages=request_messages(c.request),
        response=answer_text(c.response),
        prompt_tokens=None if c.prompt_ids is None else len(c.prompt_ids),
        completion_tokens=None if c.completion_ids is None else len(c.completion_ids),
    )


def episode_detail(row: EpisodeRow, calls: Sequence[CallRecord]) -> EpisodeDetail:
    """An episode with its calls."""
    return carried(EpisodeDetail, row, episode_uuid=row.uuid, calls=[call_info(c) for c in calls])

"""The control API's evaluation routes (`ajet.evaluation`): record an evaluation from its eval episodes, and list
them. The figures are computed here, from the episodes as the store holds them (`ajet.evaluation_types.summarise`),
never taken from the client; every listed episode must be an eval episode of the experiment that ended with a reward.
Plain `def` routes on the experiment the call names (`X-Ajet-Experiment`, else the first).
"""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Request

from ajet.errors import InvalidRequest
from ajet.evaluation_types import (
    EvalOutcome,
    EvaluationInfo,
    EvaluationList,
    EvaluationRequest,
    EvaluationsQuery,
    passed,
    summarise,
)
from ajet.types import EpisodeStatus
from ajet_proxy.api_docs import CONTROL_ERRORS
from ajet_proxy.route_context import host_of
from ajet_store.evaluations import EvalEpisode

router = APIRouter(prefix="/swarm", tags=["evaluation"], responses=CONTROL_ERRORS)


@router.post("/record_evaluation", response_model=EvaluationInfo)
def record_evaluation(body: EvaluationRequest, request: Request) -> EvaluationInfo:
    """Store an evaluation of task set `name` from its eval episodes: its mean reward, pass@k and the policy
    versions that served it (422 naming an episode that is not an ended eval episode of this experiment)."""
    store = host_of(request).store
    found = {e.uuid: e for e in store.evaluation_episodes(body.episode_uuids)}
    episodes = [_counted(found.get(uuid), uuid, i) for i, uuid in enumerate(body.episode_uuids)]
    outcomes = [_outcome(e, body.pass_reward) for e in episodes]
    versions = (min(e.versions[0] for e in episodes), max(e.versions[1] for e in episodes))
    return store.record_evaluation(body.name, body.k, summarise(outcomes, body.k), versions, body.episode_uuids)


def _counted(episode: Optional[EvalEpisode], uuid: str, i: int) -> EvalEpisode:
    """The episode, if an evaluation may count it; else the 422 that names it."""
    field = f"episode_uuids.{i}"
    if episode is None:
        raise InvalidRequest.for_field(field, f"no episode {uuid!r} in this experiment")
    if episode.episode_type != "eval":
        why = f"{uuid} is a {episode.episode_type} episode: an evaluation counts eval episodes"
        raise InvalidRequest.for_field(field, why)
    if episode.status != EpisodeStatus.ENDED.value or episode.reward is None:
        raise InvalidRequest.for_field(field, f"{uuid} has not ended with a reward ({episode.status})")
    return episode


def _outcome(episode: EvalEpisode, pass_reward: float) -> EvalOutcome:
    reward = episode.reward or 0.0  # ended with a reward (`_counted`)
    return EvalOutcome(episode.task_id or episode.uuid, reward, passed(reward, episode.is_success, pass_reward))


@router.post("/get_evaluations", response_model=EvaluationList)
def get_evaluations(body: EvaluationsQuery, request: Request) -> EvaluationList:
    """The experiment's evaluations (of task set `name` alone, when given), oldest first."""
    return EvaluationList(evaluations=host_of(request).store.evaluations(body.name))

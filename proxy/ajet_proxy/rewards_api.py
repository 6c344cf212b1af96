"""The control API's re-scoring routes (`SwarmClient.rescore`): find or begin a reward version, hand out the
episodes it has not scored (as its reward function sees them), store a page of scores, finish it, list them.

The reward function runs in the client's process, never here; the proxy only reads and writes the store. Routes
are plain `def`s (FastAPI runs them on its thread pool: each is a few store reads or one write), on the experiment
the call names (`X-Ajet-Experiment`, else the first), with the control API's errors.
"""

from __future__ import annotations

import itertools

from fastapi import APIRouter, Request

from ajet.errors import InvalidRequest
from ajet.rescore_types import (
    RewardVersionInfo,
    RewardVersionList,
    RewardVersionRequest,
    ScoresRequest,
    UnscoredPage,
    UnscoredRequest,
    VersionRequest,
)
from ajet_proxy.api_docs import CONTROL_ERRORS
from ajet_proxy.rescore import stored_view
from ajet_proxy.route_context import host_of
from ajet_store import EpisodeReward, RewardVersion

router = APIRouter(prefix="/swarm", tags=["rescore"], responses=CONTROL_ERRORS)


def version_info(v: RewardVersion) -> RewardVersionInfo:
    """A stored reward version as the wire type."""
    return RewardVersionInfo(**v.__dict__)


@router.post("/reward_version", response_model=RewardVersionInfo)
def reward_version(body: RewardVersionRequest, request: Request) -> RewardVersionInfo:
    """The reward version of this function, source and selection: the one begun before, or a new one."""
    store = host_of(request).store
    return version_info(store.reward_version(body.function, body.source_hash, body.selection))


@router.post("/unscored_episodes", response_model=UnscoredPage)
def unscored_episodes(body: UnscoredRequest, request: Request) -> UnscoredPage:
    """The next episodes (at most `limit`) the version has not scored, as its reward function sees them."""
    store = host_of(request).store
    rows = itertools.islice(store.unscored(store.get_reward_version(body.version), page=body.limit), body.limit)
    return UnscoredPage(episodes=[stored_view(store, row) for row in rows])


@router.post("/write_scores", response_model=RewardVersionInfo)
def write_scores(body: ScoresRequest, request: Request) -> RewardVersionInfo:
    """Store a page of the version's scores (422 naming an episode the store does not have)."""
    store = host_of(request).store
    version = store.get_reward_version(body.version)
    known = store.known_episodes([s.episode_uuid for s in body.scores])
    for i, s in enumerate(body.scores):
        if s.episode_uuid not in known:
            raise InvalidRequest.for_field(f"scores.{i}.episode_uuid", f"no episode {s.episode_uuid!r} in this store")
    scores = [EpisodeReward(s.episode_uuid, version.version, s.reward, s.is_success, s.error) for s in body.scores]
    store.write_rewards(version.version, scores)
    return version_info(version)


@router.post("/finish_reward_version", response_model=RewardVersionInfo)
def finish_reward_version(body: VersionRequest, request: Request) -> RewardVersionInfo:
    """Count the version's scores and mark it finished."""
    store = host_of(request).store
    store.get_reward_version(body.version)
    return version_info(store.finish_reward_version(body.version))


@router.get("/reward_versions", response_model=RewardVersionList)
def reward_versions(request: Request) -> RewardVersionList:
    """Every reward version of the experiment, oldest first."""
    return RewardVersionList(versions=[version_info(v) for v in host_of(request).store.reward_versions()])

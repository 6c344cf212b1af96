"""Wire and RL types of re-scoring (`ajet.rescoring`, `SwarmClient.rescore`, the proxy's reward-version routes):
what a reward function is given, a selection of stored episodes, a reward version, a page of scores."""

from __future__ import annotations

import math
from typing import Any, Literal, Optional

from pydantic import Field, StrictBool, field_validator

from ajet.types import Task
from ajet.wire import AnswerModel, WireModel


class StoredEpisode(AnswerModel):
    """A rewarded episode as a re-scoring's reward function sees it (`ajet.rescoring`): what the agent's own
    reward code had when the episode ended, rebuilt from the store."""

    episode_uuid: str
    """The episode."""
    task: Task
    """The task the client ended it with (every field it sent)."""
    messages: list[dict[str, Any]]
    """The conversation of its last answered call, that answer included (chat messages as the agent sent them)."""
    tool_calls: list[dict[str, Any]]
    """Every tool call the model made in the episode, in order: `{"name": ..., "arguments": ...}` (arguments
    parsed from JSON where they parse, else the text)."""
    final_answer: str
    """The text of the episode's last answer ("" when it was only tool calls)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """The `WorkflowOutput.metadata` the client ended it with."""
    reward: Optional[float] = None
    """The reward its client gave (version 0)."""
    is_success: Optional[bool] = None
    """The success flag its client gave."""


class EpisodeSelection(WireModel):
    """Which ended episodes a re-scoring (or a replay, or a dataset export) takes; every field left out takes all. The
    wire body and the store's argument alike."""

    first_step: Optional[int] = Field(default=None, ge=0)
    """Only episodes trained at this step or later."""
    last_step: Optional[int] = Field(default=None, ge=0)
    """Only episodes trained at this step or earlier."""
    task_id: Optional[str] = Field(default=None, min_length=1, max_length=512)
    """Only this task's episodes."""
    mission: Optional[str] = Field(default=None, min_length=1, max_length=128)
    """Only this mission's episodes."""
    scored_in: Optional[int] = Field(default=None, ge=1)
    """Only episodes this earlier reward version scored without an error."""
    episode_type: Literal["train", "eval"] = "train"
    """Training or eval episodes."""

    def as_json(self) -> dict[str, Any]:
        """The selection as stored with its reward version (and the key that makes a re-run find it): the fields
        set to something."""
        return self.model_dump(exclude_none=True)


class RewardVersionRequest(WireModel):
    """Find (or begin) the reward version of a function over a selection."""

    function: str = Field(min_length=3, max_length=512)
    """The function's name, `module:function`."""
    source_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 of its source (`ajet.rescoring.source_hash`): the same name with other code is another version."""
    selection: EpisodeSelection = Field(default_factory=EpisodeSelection)
    """The episodes it scores."""


class RewardVersionInfo(AnswerModel):
    """A reward version as the server has it (version 0, the clients' own rewards, is never listed)."""

    version: int
    """1, 2, ...: the order re-scorings were begun in."""
    function: str
    """The reward function, `module:function`."""
    source_hash: str
    """sha256 of its source."""
    selection: dict[str, Any]
    """The selection it scores."""
    created_at: float
    """Unix time it was begun."""
    finished_at: Optional[float] = None
    """Unix time every selected episode had a score (None: not yet)."""
    scored: int = 0
    """Episodes it gave a reward (counted when it finished)."""
    failed: int = 0
    """Episodes its function raised on (counted when it finished)."""


class VersionRequest(WireModel):
    """Names a reward version."""

    version: int = Field(ge=1)
    """The reward version."""


class UnscoredRequest(VersionRequest):
    """The next episodes a reward version has not scored."""

    limit: int = Field(default=64, ge=1, le=1000)
    """At most this many."""


class UnscoredPage(AnswerModel):
    """Episodes to score, as the reward function sees them (oldest first; [] when none is left)."""

    episodes: list[StoredEpisode]
    """The episodes."""


class EpisodeScore(WireModel):
    """One episode's score under a reward version: a reward, or the error its function raised."""

    episode_uuid: str = Field(min_length=1, max_length=64)
    """The episode."""
    reward: Optional[float] = None
    """Its reward (None with `error`)."""
    is_success: Optional[StrictBool] = None
    """The success flag the function gave, if any."""
    error: Optional[str] = Field(default=None, max_length=4000)
    """What the function raised on it."""

    @field_validator("reward")
    @classmethod
    def _finite(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not math.isfinite(v):
            raise ValueError("reward must be finite")
        return v


class ScoresRequest(VersionRequest):
    """A page of scores of a reward version (an episode scored already keeps its first score)."""

    scores: list[EpisodeScore] = Field(max_length=1000)
    """The scores."""


class RewardVersionList(AnswerModel):
    """Every reward version of the experiment, oldest first."""

    versions: list[RewardVersionInfo]
    """The versions."""

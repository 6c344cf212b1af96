"""The two bases of every wire model: what a client sends (`WireModel`) and what the server answers (`AnswerModel`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """Base of the control API's request bodies: unknown fields are refused, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerModel(BaseModel):
    """Base of what the server answers: fields a newer server adds are ignored, so an older SDK on a client
    machine keeps working against an upgraded swarm; instances are immutable."""

    model_config = ConfigDict(extra="ignore", frozen=True)

"""`ajet_core.records.carried`: one record from another by the fields they share."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from ajet_core.records import carried


@dataclass(frozen=True)
class Row:
    uuid: str
    client_id: str
    reward: float
    internal: int = 0


class Wire(BaseModel):
    episode_uuid: str
    client_id: str
    reward: float
    note: str = "none"


@dataclass
class Live:
    uuid: str
    client_id: str
    calls: int = 0


def test_shared_fields_travel_and_given_ones_win():
    row = Row("u", "c", 0.5, internal=7)
    assert carried(Wire, row, episode_uuid=row.uuid) == Wire(episode_uuid="u", client_id="c", reward=0.5)
    assert carried(Live, row, calls=3) == Live("u", "c", 3)
    assert carried(Live, row, client_id="other").client_id == "other"


def test_a_required_field_neither_has_fails_at_once():
    with pytest.raises(TypeError):
        carried(Row, Live("u", "c"))
    with pytest.raises(TypeError, match="neither a dataclass nor a pydantic model"):
        carried(dict, Live("u", "c"))

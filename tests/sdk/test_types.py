"""Wire types refuse bad values with the field named."""

import math

import pytest
from pydantic import ValidationError

from ajet import OpenaiBaseUrlAndApiKey, Task, WorkflowOutput
from ajet.types import EndEpisodeRequest


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_refused(bad):
    with pytest.raises(ValidationError, match="reward"):
        WorkflowOutput(reward=bad)


def test_empty_task_id_refused():
    with pytest.raises(ValidationError, match="task_id"):
        Task(task_id="")


def test_end_request_needs_reward():
    with pytest.raises(ValidationError, match="reward is required"):
        EndEpisodeRequest(episode_uuid="u", task=Task(task_id="t"), workflow_output={"metadata": {}})


def test_openai_client_helpers():
    creds = OpenaiBaseUrlAndApiKey(base_url="http://127.0.0.1:1/v1", api_key="k", model="m", episode_uuid="e")
    client = creds.as_openai_client()
    assert str(client.base_url).startswith("http://127.0.0.1:1/v1") and client.api_key == "k"
    aclient = creds.as_async_openai_client()
    assert aclient.api_key == "k"


def test_answers_ignore_fields_a_newer_server_adds_and_requests_refuse_unknown_ones():
    """Client machines upgrade later than the swarm: an older SDK must read a newer server's answers."""
    from ajet.stat_types import MissionStat, RolloutStat
    from ajet.types import BeginEpisodeRequest, EpisodeResult

    stat = MissionStat.model_validate({"mission": "m", "open": 1, "ended": 2, "aborted": 0, "field_from_2027": 5})
    assert stat.ended == 2 and not hasattr(stat, "field_from_2027")
    assert (
        EpisodeResult.model_validate({"episode_uuid": "u", "status": "ended", "reward": 1.0, "new": True}).reward == 1
    )
    assert "extra" not in RolloutStat.model_config or RolloutStat.model_config["extra"] == "ignore"
    with pytest.raises(ValidationError, match="discard_episode_timeoutt"):
        BeginEpisodeRequest.model_validate({"discard_episode_timeoutt": 5})


@pytest.mark.parametrize(
    "field, bad",
    [("is_success", "yes"), ("is_success", 1), ("log_metrics", {"x": float("inf")}), ("log_metrics", {"x": "1"})],
)
def test_is_success_and_log_metrics_are_typed_strictly(field, bad):
    """`is_success: "yes"` and non-finite metrics were accepted (issue 30); both are refused, naming the field."""
    with pytest.raises(ValidationError) as info:
        WorkflowOutput(reward=1.0, **{field: bad})
    assert field in str(info.value)
    assert WorkflowOutput(reward=1.0, is_success=True, log_metrics={"x": 2}).log_metrics == {"x": 2.0}

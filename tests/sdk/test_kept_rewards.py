"""Rewards the swarm could not take, kept on the client's disk: appended durably, settled by appending, the file
emptied once nothing is pending, a line cut by a crash skipped; what a resend's answer means."""

import stat

from ajet import EpisodeConflict, StoreUnavailable, SwarmConnectionError
from ajet.kept_rewards import KeptEnd, KeptRewards, kept_path, outcome_of


def end(uuid: str) -> KeptEnd:
    return KeptEnd({"episode_uuid": uuid, "workflow_output": {"reward": 1.0}}, "client-a", "p/e", 1.0)


def test_kept_requests_stay_until_settled_and_the_file_empties(tmp_path):
    kept = KeptRewards(kept_path(tmp_path / "kept", "http://box:10086"))
    assert kept.pending() == []
    kept.keep(end("e1"))
    kept.keep(end("e2"))
    assert stat.S_IMODE(kept.path.stat().st_mode) == 0o600
    assert [e.episode_uuid for e in kept.pending()] == ["e1", "e2"]
    kept.settle({"e1": "stored"})
    assert kept.pending() == [end("e2")]  # as kept: client, experiment and body
    kept.settle({"e2": "refused"})
    assert kept.pending() == [] and kept.path.stat().st_size == 0


def test_a_line_cut_by_a_crash_is_skipped(tmp_path):
    kept = KeptRewards(tmp_path / "k.jsonl")
    kept.keep(end("e1"))
    with kept.path.open("a") as fh:
        fh.write('{"body": {"episode_uu')  # the process died mid-write
    kept.keep(end("e2"))
    assert [e.episode_uuid for e in kept.pending()] == ["e1", "e2"]


def test_each_swarm_has_its_own_file(tmp_path):
    assert kept_path(tmp_path, "http://a:1") != kept_path(tmp_path, "http://b:1")


def test_what_a_resends_answer_means():
    assert outcome_of(None) == "stored"
    assert outcome_of(StoreUnavailable("disk full")) == "later"
    assert outcome_of(SwarmConnectionError("refused")) == "later"
    assert outcome_of(EpisodeConflict("episode x is expired")) == "refused"

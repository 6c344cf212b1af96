"""The proxy's group commit of begins and ends (`EpisodeCommitter`), over a real SQLite store."""

import asyncio

import pytest

from ajet import AgentJetJob
from ajet.errors import EpisodeConflict
from ajet.types import EpisodeStatus, ExperimentState
from ajet_proxy.lifecycle import EpisodeCommitter
from ajet_store import BeginEpisode, EndEpisode, Store, sqlite_url


@pytest.fixture
def rig(tmp_path):
    st = Store(sqlite_url(tmp_path / "l.db"))
    st.sync_job(AgentJetJob(batch_size=1, num_repeat=1))
    st.transition(ExperimentState.BOOTING, allowed_from=[ExperimentState.OFFLINE])
    st.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    committer = EpisodeCommitter(st)
    committer.start()
    yield st, committer
    committer.stop()
    st.close()


def test_changes_arriving_together_share_transactions_and_each_hears_its_own_answer(rig):
    st, committer = rig

    async def scenario():
        begun = await asyncio.gather(
            *(committer.apply(BeginEpisode(f"u{i}", f"h{i}", "c", "train", 10)) for i in range(40))
        )
        ends = [EndEpisode(f"u{i}", "c" if i % 4 else "intruder", f"t{i % 8}", 1.0, None, {}) for i in range(40)]
        ended = await asyncio.gather(*(committer.apply(e) for e in ends), return_exceptions=True)
        return begun, ended

    begun, ended = asyncio.run(scenario())
    assert [r.uuid for r in begun] == [f"u{i}" for i in range(40)]
    refused = [i for i, r in enumerate(ended) if isinstance(r, EpisodeConflict)]
    assert refused == list(range(0, 40, 4))  # the intruder's ends, and only those
    assert all(
        st.get_episode(f"u{i}").status == (EpisodeStatus.OPEN if i % 4 == 0 else EpisodeStatus.ENDED) for i in range(40)
    )
    assert committer.changes == 80 and committer.transactions < 40  # grouped: far fewer transactions than changes


def test_a_transaction_that_fails_fails_every_change_in_it_and_keeps_none(rig, monkeypatch):
    """A failure after the changes' rows were written (here: writing the counters) rolls them all back."""
    from ajet_store import episodes

    st, committer = rig

    def broken(self, c, now):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(episodes._Tally, "write", broken)

    async def scenario():
        return await asyncio.gather(
            *(committer.apply(BeginEpisode(f"u{i}", f"h{i}", "c", "train", 10)) for i in range(5)),
            return_exceptions=True,
        )

    out = asyncio.run(scenario())
    assert all(isinstance(r, RuntimeError) and "disk gone" in str(r) for r in out)
    monkeypatch.undo()
    assert st.open_uuids() == set()


def test_a_stopped_committer_refuses_at_once_rather_than_leave_the_caller_waiting(rig):
    st, committer = rig
    committer.stop()

    async def scenario():
        with pytest.raises(RuntimeError, match="not running"):
            await committer.apply(BeginEpisode("late", "h-late", "c", "train", 10))
        with pytest.raises(RuntimeError, match="not running"):
            await committer.run(st.experiment)

    asyncio.run(scenario())
    assert st.count_episodes(["late"]) == 0

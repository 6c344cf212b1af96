"""The call log writer: what `end_episode` waits for (only an episode's own queued calls)."""

import threading
import time

from ajet_proxy.call_writer import CallWriter
from ajet_store import Store, sqlite_url
from ajet_store.types import CallRecord


class HeldStore(Store):
    """A real store whose call writes wait until released, so records stay queued as long as a test wants."""

    release = threading.Event()

    def write_calls(self, records):
        self.release.wait(10)
        super().write_calls(records)


def record(uuid: str, seq: int = 0) -> CallRecord:
    return CallRecord(uuid, seq, "{}", None, None, None, None, None, 0, None, 0.0, time.time(), error="disconnected")


def test_pending_names_only_episodes_with_calls_not_yet_written(tmp_path):
    store = HeldStore(sqlite_url(tmp_path / "s.db"))
    writer = CallWriter(store)
    writer.start()
    try:
        writer.submit(record("a"))
        writer.submit(record("a", 1))
        assert writer.pending("a") and not writer.pending("b")
        store.release.set()
        assert writer.flush(10)
        assert not writer.pending("a") and len(store.calls("a")) == 2
    finally:
        store.release.set()
        writer.stop()
        store.close()

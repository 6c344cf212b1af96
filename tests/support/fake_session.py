"""A `TrainingSession` that trains nothing and fails on demand, for the trainer's state machine: the daemon's and
each experiment driver's tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

from ajet import AgentJetJob
from ajet_store import Store
from ajet_store.types import PoolEpisode, RegisteredEngine
from ajet_trainer.errors import EngineLost
from tests.support.stores import end_with_a_call


@dataclass
class FakeSession:
    """A `TrainingSession` whose `train` raises while `failures` says so (a text: a `RuntimeError` of it; an error:
    that error)."""

    job: AgentJetJob
    run_id: int
    store: Store
    failures: list[Union[str, Exception]] = field(default_factory=list)
    step: int = 0
    lost: list[str] = field(default_factory=list)
    """Engines that exited: the next `check_engines` raises `EngineLost` naming the first."""
    closed_with: Optional[bool] = None

    @property
    def policy_version(self) -> int:
        return self.step

    @property
    def base_url(self) -> str:
        return "http://127.0.0.1:9/v1"

    def registered(self) -> list[RegisteredEngine]:
        return [RegisteredEngine("fake", self.base_url, "policy", self.step)]

    def register(self) -> None:
        self.store.register_engines(self.registered())

    def check_engines(self) -> None:
        if self.lost:
            raise EngineLost(f"the last vLLM engine ({self.lost.pop(0)}) exited with -9")

    def train(self, batch: Sequence[PoolEpisode], timers: dict) -> dict:
        if self.failures:
            failure = self.failures.pop(0)
            raise failure if isinstance(failure, Exception) else RuntimeError(failure)
        self.step += 1
        self.store.record_step(self.step, self.step, [p.uuid for p in batch], 0.5, dict(timers))  # as sessions do
        return dict(timers)

    def close(self, final_checkpoint: bool) -> None:
        self.closed_with = final_checkpoint


def fill_batch(st: Store, tag: str) -> list[str]:
    uuids = []
    for i in range(2):
        uuid = f"{tag}{i}"
        st.begin_episode(uuid, "h" + uuid, "c", "train", 60)
        end_with_a_call(st, uuid, float(i), task_id="task")
        uuids.append(uuid)
    return uuids

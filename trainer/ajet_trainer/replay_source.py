"""Where a replay job's episodes come from: its source experiment's store, opened beside the swarm's first store
(`AgentJetJob.replay`; the copying itself is `ajet_store.replay`)."""

from __future__ import annotations

from typing import Literal

from ajet.errors import ConfigError, ExperimentNotFound
from ajet.job import AgentJetJob
from ajet.sharing import experiment_of
from ajet_store import Catalog, Store
from ajet_store.replay import ReplayImport
from ajet_trainer.options import TrainerOptions

PICKS: dict[str, Literal["all", "best", "pair"]] = {"grpo": "all", "sft": "best", "dpo": "pair"}
"""Which episodes of each source group a replay copies, by how it trains them."""


def open_replay(job: AgentJetJob, opts: TrainerOptions, target: Store) -> ReplayImport:
    """The import of `job.replay`'s episodes into `target` (the replay experiment's store). `ExperimentNotFound`
    for a source the swarm does not list; `ConfigError` for a job that names its own experiment."""
    source_spec = job.replay
    assert source_spec is not None, "open_replay of a job without replay"
    source, entries = Catalog(Store(opts.db_url, opts.db_mode, opts.trainer_timeout_s)).take_named(
        source_spec.experiment
    )
    name = source_spec.experiment or entries[0].name
    if source is None:
        listed = ", ".join(e.name for e in entries)
        raise ExperimentNotFound(f"no experiment {name!r} to replay (the swarm has: {listed})")
    if name == experiment_of(job):
        source.close()
        raise ConfigError(f"a replay job trains on another experiment's episodes, not its own ({name!r})")
    return ReplayImport(
        source, target, name, source_spec.selection, source_spec.reward_version, source_spec.mission,
        pick=PICKS[source_spec.train], min_reward=source_spec.min_reward, margin=source_spec.margin,
    )  # fmt: skip

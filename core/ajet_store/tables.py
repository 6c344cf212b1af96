"""SQLAlchemy Core tables of the store, and the packing of token id / logprob arrays.

Only portable types are used (no SQLite-only SQL), so a PostgreSQL URL works through the same code.
Token ids are packed as little-endian int32, logprobs as float64: compact and exact.
"""

from __future__ import annotations

import sys
from array import array
from typing import Optional, Sequence

import sqlalchemy as sa

SCHEMA_VERSION = 20

metadata = sa.MetaData()

meta = sa.Table(
    "ajet_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("state_since", sa.Float, nullable=False),
    sa.Column("job", sa.JSON, nullable=True),
    sa.Column("global_step", sa.Integer, nullable=False, default=0),
    sa.Column("policy_version", sa.Integer, nullable=False, default=0),
    sa.Column("batch_mode", sa.String(64), nullable=False),
    sa.Column("engines_version", sa.Integer, nullable=False, default=0),
    sa.Column("run_id", sa.Integer, nullable=False, default=0),
    sa.Column("trainer_heartbeat", sa.Float, nullable=True),
    sa.Column("last_error", sa.String(1024), nullable=True),
    sa.Column("last_error_at", sa.Float, nullable=True),
    sa.Column("update_failures", sa.Integer, nullable=False, default=0, server_default="0"),
    sa.Column("updating_since", sa.Float, nullable=True),
    sa.Column("template_verdict", sa.JSON, nullable=True),
    sa.Column("trainer_host", sa.String(255), nullable=True),
    sa.Column("trainer_pid", sa.Integer, nullable=True),
    sa.Column("trainer_alone", sa.String(1024), nullable=True),
    sa.Column("trainer_stopped_at", sa.Float, nullable=True),
)

swarm_experiments = sa.Table(
    "swarm_experiments",
    metadata,
    sa.Column("slug", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(512), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
)
"""The swarm's experiments beside the default (`ajet_store.catalog`), each with a store of its own; only the first
store's table is read."""

swarm_proxies = sa.Table(
    "swarm_proxies",
    metadata,
    sa.Column("proxy_id", sa.String(64), primary_key=True),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("beat_at", sa.Float, nullable=False),
)
"""The proxies serving the swarm, each beating every second (`ajet_store.proxies`): they split each experiment's
`max_calls_in_flight` between them. Only the first store's table is read."""

counters = sa.Table(
    "counters",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("value", sa.Float, nullable=False),
)
"""Totals kept as the data is written (see `ajet_store.counters`), so statistics never count rows."""

episodes = sa.Table(
    "episodes",
    metadata,
    sa.Column("uuid", sa.String(64), primary_key=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("client_id", sa.String(256), nullable=False),
    sa.Column("task_id", sa.String(512), nullable=True, index=True),
    sa.Column("episode_type", sa.String(16), nullable=False),
    sa.Column("mission", sa.String(128), nullable=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("reward", sa.Float, nullable=True),
    sa.Column("is_success", sa.Boolean, nullable=True),
    sa.Column("metadata", sa.JSON, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("last_active_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float, nullable=True),
    sa.Column("timeout_s", sa.Float, nullable=False),
    sa.Column("policy_version_start", sa.Integer, nullable=False),
    sa.Column("run_id", sa.Integer, nullable=False, default=0),
    sa.Column("consumed_step", sa.Integer, nullable=True, index=True),
    sa.Column("untrainable", sa.Boolean, nullable=False, default=False),
    sa.Column("untrainable_reason", sa.String(256), nullable=True),
    sa.Column("num_calls", sa.Integer, nullable=False, default=0),
    sa.Column("calls_reserved", sa.Integer, nullable=False, default=0, server_default="0"),
    # the statistics and the trainer's pool query read only these indexes, never the wide rows
    sa.Index("ix_episodes_pool", "consumed_step", "status", "episode_type", "untrainable", "ended_at"),
    sa.Index("ix_episodes_missions", "episode_type", "mission", "status", "reward"),
    sa.Index("ix_episodes_created", "created_at", "uuid"),  # the explorer's newest-first list
)

llm_calls = sa.Table(
    "llm_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("episode_uuid", sa.String(64), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("request", sa.Text, nullable=False),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("prompt_ids", sa.LargeBinary, nullable=True),
    sa.Column("completion_ids", sa.LargeBinary, nullable=True),
    sa.Column("logprobs", sa.LargeBinary, nullable=True),
    sa.Column("finish_reason", sa.String(32), nullable=True),
    sa.Column("policy_version", sa.Integer, nullable=False),
    sa.Column("engine", sa.String(128), nullable=True),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("stream", sa.Boolean, nullable=False, default=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("token_history", sa.String(64), nullable=True),
    sa.Column("parent_seq", sa.Integer, nullable=True),
    sa.Column("response_id", sa.String(64), nullable=True, index=True),
    sa.Column("truncated", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
    sa.Column("client_gone", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
    sa.Column("version_spans", sa.JSON, nullable=True),
    sa.Column("images", sa.JSON, nullable=True),
)

images = sa.Table(
    "images",
    metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("mime", sa.String(32), nullable=False),
    sa.Column("width", sa.Integer, nullable=False),
    sa.Column("height", sa.Integer, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

engines = sa.Table(
    "engines",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("base_url", sa.String(512), nullable=False),
    sa.Column("model", sa.String(512), nullable=False),
    sa.Column("policy_version", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("api_key", sa.String(128), nullable=True),
)

clients = sa.Table(
    "clients",
    metadata,
    sa.Column("client_id", sa.String(256), primary_key=True),
    sa.Column("first_seen", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.Column("begun", sa.Integer, nullable=False, default=0),
    sa.Column("ended", sa.Integer, nullable=False, default=0),
    sa.Column("aborted", sa.Integer, nullable=False, default=0),
)

steps = sa.Table(
    "train_steps",
    metadata,
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("policy_version", sa.Integer, nullable=False),
    sa.Column("num_episodes", sa.Integer, nullable=False),
    sa.Column("reward_mean", sa.Float, nullable=True),
    sa.Column("metrics", sa.JSON, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=False),
)

evaluations = sa.Table(
    "evaluations",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("k", sa.Integer, nullable=False),
    sa.Column("tasks", sa.Integer, nullable=False),
    sa.Column("episodes", sa.Integer, nullable=False),
    sa.Column("mean_reward", sa.Float, nullable=False),
    sa.Column("pass_at_k", sa.Float, nullable=False),
    sa.Column("version_min", sa.Integer, nullable=False),
    sa.Column("version_max", sa.Integer, nullable=False),
    sa.Column("global_step", sa.Integer, nullable=False),
    sa.Column("episode_uuids", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_evaluations_name", "name", "id"),
)
"""One row per evaluation of a held-out task set (`ajet.evaluation`): its figures, computed by the proxy from its
eval episodes (listed), and the policy versions that served them."""

judge_calls = sa.Table(
    "judge_calls",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("request", sa.Text, nullable=False),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)
"""Calls to the served judge (`/judge/v1`), logged apart from the episodes' calls: they join no episode and are never
trained."""

reward_versions = sa.Table(
    "reward_versions",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("function", sa.String(512), nullable=False),
    sa.Column("source_hash", sa.String(64), nullable=False),
    sa.Column("selection", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("scored", sa.Integer, nullable=False, default=0),
    sa.Column("failed", sa.Integer, nullable=False, default=0),
    sa.Column("selection_key", sa.String(64), nullable=False),
    sa.UniqueConstraint("function", "source_hash", "selection_key", name="uq_reward_versions_identity"),
)
"""Re-scorings of stored episodes (`ajet_store.rewards`): version 0 is the reward each client gave at the end of its
episode (`episodes.reward`, never overwritten); each later version is one reward function over one selection."""

episode_rewards = sa.Table(
    "episode_rewards",
    metadata,
    sa.Column("episode_uuid", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("reward", sa.Float, nullable=True),
    sa.Column("is_success", sa.Boolean, nullable=True),
    sa.Column("error", sa.String(1024), nullable=True),
    sa.Column("scored_at", sa.Float, nullable=False),
)
"""An episode's reward under a reward version (None with `error`: the function raised on it)."""


def _pack(values: Optional[Sequence[float]], typecode: str) -> Optional[bytes]:
    if values is None:
        return None
    arr = array(typecode, values)
    if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
        arr.byteswap()
    return arr.tobytes()


def _unpack(blob: Optional[bytes], typecode: str) -> Optional[list]:
    if blob is None:
        return None
    arr = array(typecode)
    arr.frombytes(blob)
    if sys.byteorder != "little":  # pragma: no cover
        arr.byteswap()
    return arr.tolist()


def pack_ints(values: Optional[Sequence[int]]) -> Optional[bytes]:
    """Token ids as little-endian int32 bytes (None stays None)."""
    return _pack(values, "i")


def unpack_ints(blob: Optional[bytes]) -> Optional[list[int]]:
    """Inverse of `pack_ints`."""
    return _unpack(blob, "i")


def pack_floats(values: Optional[Sequence[float]]) -> Optional[bytes]:
    """Logprobs as little-endian float64 bytes (None stays None)."""
    return _pack(values, "d")


def unpack_floats(blob: Optional[bytes]) -> Optional[list[float]]:
    """Inverse of `pack_floats`."""
    return _unpack(blob, "d")

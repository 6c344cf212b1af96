"""Schema 1: the store as first released (engine row, episodes, calls, deployments, clients, steps).

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ajet_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    op.create_table(
        "engine_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("state_since", sa.Float, nullable=False),
        sa.Column("job", sa.JSON, nullable=True),
        sa.Column("global_step", sa.Integer, nullable=False),
        sa.Column("policy_version", sa.Integer, nullable=False),
        sa.Column("batch_mode", sa.String(64), nullable=False),
        sa.Column("deployments_version", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
    )
    _episodes()
    _calls()
    op.create_table(
        "deployments",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("base_url", sa.String(512), nullable=False),
        sa.Column("model", sa.String(512), nullable=False),
        sa.Column("policy_version", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "clients",
        sa.Column("client_id", sa.String(256), primary_key=True),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.Column("begun", sa.Integer, nullable=False),
        sa.Column("ended", sa.Integer, nullable=False),
        sa.Column("aborted", sa.Integer, nullable=False),
    )
    op.create_table(
        "train_steps",
        sa.Column("step", sa.Integer, primary_key=True),
        sa.Column("policy_version", sa.Integer, nullable=False),
        sa.Column("num_episodes", sa.Integer, nullable=False),
        sa.Column("reward_mean", sa.Float, nullable=True),
        sa.Column("metrics", sa.JSON, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=False),
    )
    op.execute("INSERT INTO ajet_meta (key, value) VALUES ('schema_version', '1')")


def _episodes() -> None:
    op.create_table(
        "episodes",
        sa.Column("uuid", sa.String(64), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("client_id", sa.String(256), nullable=False),
        sa.Column("task_id", sa.String(512), nullable=True),
        sa.Column("episode_type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reward", sa.Float, nullable=True),
        sa.Column("is_success", sa.Boolean, nullable=True),
        sa.Column("metadata", sa.JSON, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_active_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("policy_version_start", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("consumed_step", sa.Integer, nullable=True),
        sa.Column("untrainable", sa.Boolean, nullable=False),
        sa.Column("untrainable_reason", sa.String(256), nullable=True),
        sa.Column("num_calls", sa.Integer, nullable=False),
    )
    for col in ("task_id", "status", "consumed_step"):
        op.create_index(f"ix_episodes_{col}", "episodes", [col])


def _calls() -> None:
    op.create_table(
        "llm_calls",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("episode_uuid", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("request", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("prompt_ids", sa.LargeBinary, nullable=True),
        sa.Column("completion_ids", sa.LargeBinary, nullable=True),
        sa.Column("logprobs", sa.LargeBinary, nullable=True),
        sa.Column("finish_reason", sa.String(32), nullable=True),
        sa.Column("policy_version", sa.Integer, nullable=False),
        sa.Column("deployment", sa.String(128), nullable=True),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_llm_calls_episode_uuid", "llm_calls", ["episode_uuid"])


def downgrade() -> None:
    for table in ("train_steps", "clients", "deployments", "llm_calls", "episodes", "engine_state", "ajet_meta"):
        op.drop_table(table)

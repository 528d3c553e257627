"""Initial schema: spans, runs, attributions.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here on purpose: a migration must not change when the models do.
JSON_COLUMN = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "spans",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_id", sa.String(16), nullable=False),
        sa.Column("parent_span_id", sa.String(16), nullable=True),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("start_time_unix_nano", sa.BigInteger(), nullable=False),
        sa.Column("end_time_unix_nano", sa.BigInteger(), nullable=False),
        sa.Column("status_code", sa.SmallInteger(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=False),
        sa.Column("attributes", JSON_COLUMN, nullable=False),
        sa.Column("events", JSON_COLUMN, nullable=False),
        sa.Column("resource_attributes", JSON_COLUMN, nullable=False),
        sa.Column("scope_name", sa.String(), nullable=False),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "span_id", name="pk_spans"),
    )
    op.create_index("ix_spans_run_id_start", "spans", ["run_id", "start_time_unix_nano"])

    op.create_table(
        "runs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("root_span_id", sa.String(16), nullable=True),
        sa.Column("root_started_at", sa.BigInteger(), nullable=True),
        sa.Column("root_ended_at", sa.BigInteger(), nullable=True),
        sa.Column("root_error", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=False),
        sa.Column("last_span_received_at", sa.BigInteger(), nullable=False),
        sa.Column("n_spans", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("outcome_reason", sa.Text(), nullable=True),
        sa.Column("outcome_posted_at", sa.BigInteger(), nullable=True),
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("ground_truth", sa.Text(), nullable=True),
        sa.Column("final_answer", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("needs_sweep", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
    )
    op.create_index("ix_runs_created_at_id", "runs", ["created_at", "id"])
    op.create_index("ix_runs_status_last_span", "runs", ["status", "last_span_received_at"])
    op.create_index("ix_runs_needs_sweep_status", "runs", ["needs_sweep", "status"])

    op.create_table(
        "attributions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("method", sa.String(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("agent", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("payload", JSON_COLUMN, nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_attributions"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_attributions_run_id_runs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_attributions_run_id", "attributions", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_attributions_run_id", table_name="attributions")
    op.drop_table("attributions")
    op.drop_index("ix_runs_needs_sweep_status", table_name="runs")
    op.drop_index("ix_runs_status_last_span", table_name="runs")
    op.drop_index("ix_runs_created_at_id", table_name="runs")
    op.drop_table("runs")
    op.drop_index("ix_spans_run_id_start", table_name="spans")
    op.drop_table("spans")

"""The nightly benchmark's suite runs and their scored entries (its history).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON_COLUMN = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bench_runs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("suite", sa.String(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("code_version", sa.String(), nullable=False),
        sa.Column("plan", JSON_COLUMN, nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_bench_runs"),
    )
    op.create_index("ix_bench_runs_suite_started", "bench_runs", ["suite", "started_at"])
    op.create_table(
        "bench_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("entry", sa.String(), nullable=False),
        sa.Column("dataset", sa.String(), nullable=False),
        sa.Column("attributor", sa.String(), nullable=False),
        sa.Column("settings", sa.String(), nullable=False),
        sa.Column("method", sa.String(), nullable=False),
        sa.Column("code_version", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("wall_time_s", sa.Float(), nullable=False),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("agent_accuracy", sa.Float(), nullable=False),
        sa.Column("step_accuracy", sa.Float(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("figures", JSON_COLUMN, nullable=False),
        sa.Column("records", JSON_COLUMN, nullable=False),
        sa.Column("definition", JSON_COLUMN, nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("baseline_id", sa.Integer(), nullable=True),
        sa.Column("gate", JSON_COLUMN, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_bench_history"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["bench_runs.id"], name="fk_bench_history_run_id", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("run_id", "entry", name="ux_bench_history_run_entry"),
    )
    op.create_index("ix_bench_history_entry_id", "bench_history", ["entry", "id"])


def downgrade() -> None:
    op.drop_index("ix_bench_history_entry_id", table_name="bench_history")
    op.drop_table("bench_history")
    op.drop_index("ix_bench_runs_suite_started", table_name="bench_runs")
    op.drop_table("bench_runs")

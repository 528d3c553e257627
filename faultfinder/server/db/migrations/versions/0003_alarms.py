"""Early alarms of the online auditor.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alarms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("steps_seen", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alarms"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_alarms_run_id_runs", ondelete="CASCADE"
        ),
    )
    op.create_index("ux_alarms_run_id", "alarms", ["run_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_alarms_run_id", table_name="alarms")
    op.drop_table("alarms")

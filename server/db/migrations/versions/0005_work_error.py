"""Runs remember whether their last work ended in an error.

A run's root may say OK while the exception that ended its work escaped below it (the
OpenAI Agents SDK), or never arrive at all (smolagents when the model endpoint fails):
the latest-ending span other than the root, and whether it (or one ending with it) was
an ERROR, let the lifecycle fail such runs.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Runs stored before this revision have no record of their work: null and false,
    # which leaves their outcome as the root's status decided it.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("work_ended_at", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("work_error", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("work_error")
        batch.drop_column("work_ended_at")

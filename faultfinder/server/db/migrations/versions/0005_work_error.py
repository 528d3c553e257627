"""Runs remember whether a span other than the root ended in an error.

A run's root may say OK while the exception that ended its work escaped below it (the
OpenAI Agents SDK), or never arrive at all (smolagents when the model endpoint fails).
The lifecycle reads the spans of the runs so marked to tell an error that ended the work
from one the agents recovered from; the runs without one (most) it settles in SQL alone.

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
    # Runs stored before this revision are not marked: their outcome stays as the root's
    # status decided it.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("work_error", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("work_error")

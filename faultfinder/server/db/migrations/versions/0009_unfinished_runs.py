"""Runs remember whether their root is still to come, and whether they were finished
without it.

A span whose sender says its parent is in the same process (OTLP span flags) tells the
lifecycle that a run with no root yet has one still open, or lost with its process: such
a run waits `unfinished_after` instead of the quiet period, and is then finished
`failed`, marked `unfinished`. LlamaIndex under OpenLLMetry, for one, never ends its
workflow's span when an exception escapes: nothing else says the run failed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Runs stored before this revision keep the rules they were stored under: no span of
    # theirs is known to have a local parent.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("local_parent", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(
            sa.Column("unfinished", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("recovered_checked_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("recovered_checked_at")
        batch.drop_column("unfinished")
        batch.drop_column("local_parent")

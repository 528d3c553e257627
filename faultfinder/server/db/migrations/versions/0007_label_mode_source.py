"""Labels say where they came from and which error mode they name.

A label is a person's verdict (`human`) or the exact answer of a controlled failure
injection (`injected`, with the error mode and the injected text in `details`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON_COLUMN = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Labels stored before this revision were all given by people.
    with op.batch_alter_table("labels") as batch:
        batch.add_column(sa.Column("mode", sa.String(), nullable=True))
        batch.add_column(sa.Column("source", sa.String(), nullable=False, server_default="human"))
        batch.add_column(sa.Column("details", JSON_COLUMN, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("labels") as batch:
        batch.drop_column("details")
        batch.drop_column("source")
        batch.drop_column("mode")

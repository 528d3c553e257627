"""Runs keep their trajectory's agents and step count once they finish.

Listings, search and the dashboard showed each run's agents and step count by reading
all of its spans and assembling the trajectory, per run and per page. The lifecycle now
keeps both on the run row when it finishes the run; a span arriving later clears them
until the run is settled again. Runs stored before this revision have neither and are
assembled on demand, as before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("agents", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True)
        )
        batch.add_column(sa.Column("n_steps", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("n_steps")
        batch.drop_column("agents")

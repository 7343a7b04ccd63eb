"""Leases: the store that runs a job (`owner`) and when it last said so (`heartbeat_at`, the database's clock in
seconds since the epoch).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("owner", sa.Text()))
    op.add_column("jobs", sa.Column("heartbeat_at", sa.Float()))
    op.create_index("jobs_lease", "jobs", ["state", "heartbeat_at"])


def downgrade() -> None:
    op.drop_index("jobs_lease", "jobs")
    with op.batch_alter_table("jobs") as batch:  # SQLite rebuilds the table; PostgreSQL drops the columns
        batch.drop_column("heartbeat_at")
        batch.drop_column("owner")

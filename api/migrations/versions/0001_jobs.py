"""The jobs table: one row per job (its files live in data_dir/jobs/<id>/).

Revision ID: 0001
Revises:
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
        "jobs",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
        sa.Column("progress", sa.Text(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cancel_requested", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("filename", sa.Text()),
        sa.Column("warnings", sa.Text()),
    )
    op.create_index("jobs_state", "jobs", ["state", "created_at"])
    op.create_index("jobs_created", "jobs", ["created_at", "id"])


def downgrade() -> None:
    op.drop_table("jobs")

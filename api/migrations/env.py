"""Alembic environment: migrations run on the connection the job store passes in `config.attributes`."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "the job store's migrations run from api.jobs (JobStore opens the database and migrates it)"
    )
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()

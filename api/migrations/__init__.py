"""Alembic migrations of the job store's schema, run programmatically (`upgrade head`) when a JobStore opens."""

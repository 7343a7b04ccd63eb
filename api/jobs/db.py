"""The job store's database: the `jobs` table, the engines of its two backends (embedded SQLite, or a
PostgreSQL server shared by replicas), raw SQL with portable placeholders, and what a database error means
for the caller (the database is unreachable, or a query is wrong). The store's queries live in `store.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

metadata = sa.MetaData()
jobs_table = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("progress", sa.Text, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("cancel_requested", sa.Integer, nullable=False, server_default="0"),
    sa.Column("filename", sa.Text),
    sa.Column("warnings", sa.Text),
    sa.Column("owner", sa.Text),  # the store that runs the job, or ran it last
    sa.Column("heartbeat_at", sa.Float),  # the database's clock, seconds since the epoch
)


def store_unavailable(err: BaseException) -> bool:
    """Whether `err` says the database cannot be reached (down, restarting, its connections cut, no connection
    free in time), as opposed to a bug in a query."""
    if isinstance(err, sa_exc.OperationalError) and type(getattr(err, "orig", None)).__module__ == "sqlite3":
        # SQLite says OperationalError for a query's bug too ("no such column"): only these are the file's state
        return any(m in str(err.orig).lower() for m in _SQLITE_UNAVAILABLE)
    if isinstance(err, sa_exc.TimeoutError | sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    return isinstance(err, sa_exc.DBAPIError) and err.connection_invalidated


_SQLITE_UNAVAILABLE = ("locked", "busy", "disk i/o", "unable to open", "disk is full", "readonly")


def short_reason(err: BaseException) -> str:
    """The first line of the driver's message (never a query or its parameters)."""
    orig = getattr(err, "orig", None) or err
    lines = str(orig).strip().splitlines() or [type(orig).__name__]
    return lines[0][:200]


def sqlite_engine(db_path: Path) -> sa.Engine:
    """The embedded store: WAL, synchronous FULL, and transactions opened by SQLAlchemy's `begin` event, as
    `BEGIN IMMEDIATE` for connections with the `immediate` execution option (writes that read first), so a
    count-then-insert or select-then-update holds the write lock from its first statement."""
    engine = sa.create_engine(
        f"sqlite+pysqlite:///{db_path}",
        connect_args={"timeout": 30, "check_same_thread": False},
        pool_pre_ping=True,
    )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite emits no BEGIN of its own: the hook below does
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("immediate") else "BEGIN")

    return engine


def server_engine(url: str) -> sa.Engine:
    """A database server (PostgreSQL): connections checked before use, so the store recovers by itself once the
    server is back; a connection attempt gives up after a few seconds rather than hang a request."""
    parsed = sa.make_url(url)
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = 5
        # a statement never hangs a worker or its heartbeat on a half-open connection
        connect_args.setdefault("options", "-c statement_timeout=15000")
        connect_args.update(keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
    return sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)


class RawSQL:
    """A connection for raw SQL written with `?` placeholders whatever the driver's (tests, one-off repairs)."""

    def __init__(self, conn: Connection, paramstyle: str) -> None:
        self._conn, self._paramstyle = conn, paramstyle

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sa.CursorResult[Any]:
        if self._paramstyle in ("format", "pyformat"):
            sql = sql.replace("?", "%s")
        return self._conn.exec_driver_sql(sql, tuple(params) if params else None)

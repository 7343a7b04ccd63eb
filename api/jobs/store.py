"""The job store: jobs as rows of the `jobs` table and their inputs and results as files under `jobs_dir`,
with the writes that keep both consistent across crashes and, on PostgreSQL, across replicas (atomic
admission under `max_queue`, claims exactly once, leases with heartbeats, recovery of dead runs, results
made visible in one rename). Schema migrations (Alembic, in `api/migrations/`) run when a store opens.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from api.jobs.db import RawSQL, jobs_table, server_engine, sqlite_engine
from api.jobs.model import FINISHED, STAGES, Job, JobParams, JobState, QueueFull, UnknownCursor
from pipeline.utils import atomic_write_bytes

logger = logging.getLogger("api.jobs")  # one logger for the package: its log lines keep one name

_J = jobs_table.c

MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"  # api/migrations, beside this package
# pg_advisory_xact_lock keys: admission under max_queue, and schema migrations of replicas starting together.
_ADMISSION_LOCK = 0x73656D01
_MIGRATION_LOCK = 0x73656D02
_PARTIAL = "result.partial"  # + "-<owner>": each run writes its own


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (0 if it vanished meanwhile)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


class JobStore:
    """Jobs in a database: `data_dir/jobs.sqlite3` (embedded, one process), or the server `database_url` names
    (PostgreSQL, shared by replicas); each job's files in `data_dir/jobs/<id>/`, which with a shared database
    must be a folder every replica mounts. Safe across threads and, on PostgreSQL, across processes.

    Each store has an `owner` id. A claimed job records its owner and a heartbeat; the owner's writes to a job
    (`set_progress`, `finish`, `requeue`, `write_result`) apply only while the job is still its own, so a run
    whose lease expired and was taken over cannot clobber the new run."""

    def __init__(
        self,
        data_dir: Path,
        database_url: str | None = None,
        *,
        owner: str | None = None,
        jobs_dir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.jobs_dir = Path(jobs_dir) if jobs_dir is not None else self.data_dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.data_dir / "jobs.sqlite3"
        # host-pid-random: an operator (or a test) sees which process of which machine runs a job
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.engine = sqlite_engine(self.db_path) if database_url is None else server_engine(database_url)
        self.is_postgres = self.engine.dialect.name == "postgresql"
        self.migrate()
        self._disk_lock = threading.Lock()
        self.disk_bytes = sum(_tree_bytes(p) for p in self.jobs_dir.iterdir() if p.is_dir())

    def __repr__(self) -> str:
        return f"JobStore({self.data_dir}, {self.engine.dialect.name}, owner={self.owner})"

    # ---- the database ---------------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic `upgrade head`, run at every open). A store written
        before the schema had revisions (no alembic_version table) is stamped with the first revision, after
        gaining the column it may lack, then upgraded: its jobs are kept. On PostgreSQL an advisory lock makes
        replicas that start together migrate one after the other."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self._write() as conn:
            if self.is_postgres:
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
            config.attributes["connection"] = conn
            inspector = sa.inspect(conn)
            tables = set(inspector.get_table_names())
            if "jobs" in tables and "alembic_version" not in tables:
                columns = {c["name"] for c in inspector.get_columns("jobs")}
                if "warnings" not in columns:
                    conn.exec_driver_sql("ALTER TABLE jobs ADD COLUMN warnings TEXT")
                logger.info("job store without schema revisions: stamping it with the first")
                command.stamp(config, "0001")
            command.upgrade(config, "head")

    def close(self) -> None:
        """Close the pooled connections (the store works again on the next call)."""
        self.engine.dispose()

    def ping(self) -> None:
        """Raise if the database cannot be reached now."""
        with self.engine.connect() as conn:
            conn.execute(sa.select(1))

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One transaction that writes, committed at the end (BEGIN IMMEDIATE on SQLite)."""
        with self.engine.connect().execution_options(immediate=True) as conn, conn.begin():
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            yield conn

    @contextmanager
    def _db(self) -> Iterator[RawSQL]:
        """Raw SQL with `?` placeholders in one write transaction (tests and repairs; the store's own queries
        are SQLAlchemy Core)."""
        with self._write() as conn:
            yield RawSQL(conn, self.engine.dialect.paramstyle)

    def _now(self) -> sa.ColumnElement[float]:
        """The database's clock in seconds since the epoch: leases compare times of one clock, whatever the
        replicas' clocks say."""
        if self.is_postgres:
            return sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Float)
        return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Float)

    def _mine(self) -> sa.ColumnElement[bool]:
        """Rows this store may write as a job's runner: its own running jobs, and jobs no store ever claimed."""
        return sa.or_(_J.owner.is_(None), sa.and_(_J.owner == self.owner, _J.state == JobState.running.value))

    @staticmethod
    def _row(row: sa.Row[Any]) -> Job:
        m = row._mapping
        return Job(
            id=m["id"],
            state=JobState(m["state"]),
            created_at=m["created_at"],
            updated_at=m["updated_at"],
            params=JobParams.from_dict(json.loads(m["params"])),
            progress=json.loads(m["progress"]),
            error=m["error"],
            attempts=m["attempts"],
            cancel_requested=bool(m["cancel_requested"]),
            filename=m["filename"],
            warnings=json.loads(m["warnings"]) if m["warnings"] else [],
            owner=m["owner"],
        )

    # ---- files ------------------------------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    def input_path(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "input"

    def result_path(self, job_id: str, name: str) -> Path:
        return self.job_dir(job_id) / "result" / name

    # ---- jobs ---------------------------------------------------------------------------------------------------
    def create(
        self, data: bytes, params: JobParams, filename: str | None = None, max_queue: int | None = None
    ) -> Job:
        """Store the input, then queue the job. With `max_queue`, admission is atomic: the count of queued
        jobs and the insert happen in one write transaction (on PostgreSQL under an advisory lock), so the queue
        never holds more than `max_queue` (`QueueFull` otherwise, and the input is removed). Blocking (fsync):
        call it off the event loop."""
        job_id = uuid.uuid4().hex
        try:
            atomic_write_bytes(self.input_path(job_id), data)  # the file first: a row never points at nothing
        except OSError:  # e.g. the disk is full: no folder without a row stays behind
            shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
            raise
        now = time.time()
        progress = {s: {"done": 0, "total": 0} for s in STAGES}
        try:
            with self._write() as db:
                if max_queue is not None:
                    if self.is_postgres:
                        db.execute(sa.select(sa.func.pg_advisory_xact_lock(_ADMISSION_LOCK)))
                    queued = db.execute(
                        sa.select(sa.func.count()).where(_J.state == JobState.queued.value)
                    ).scalar_one()
                    if queued >= max_queue:
                        raise QueueFull(max_queue)
                db.execute(
                    jobs_table.insert().values(
                        id=job_id,
                        state=JobState.queued.value,
                        created_at=now,
                        updated_at=now,
                        params=json.dumps(params.to_dict()),
                        progress=json.dumps(progress),
                        filename=filename,
                    )
                )
        except BaseException:
            shutil.rmtree(self.job_dir(job_id), ignore_errors=True)  # refused, or the database failed
            raise
        with self._disk_lock:
            self.disk_bytes += len(data)
        job = self.get(job_id)
        assert job is not None
        return job

    def delete(self, job_id: str) -> bool:
        """Remove a job that is not running (queued or finished): its row first (it is gone for readers and the
        worker at once), then its files. False if the job is unknown or running. A crash between the two
        leaves files that the retention sweep removes."""
        with self._write() as db:
            deleted = (
                db.execute(
                    jobs_table.delete().where(_J.id == job_id, _J.state != JobState.running.value)
                ).rowcount
                == 1
            )
        if deleted:
            freed = _tree_bytes(self.job_dir(job_id))
            shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
            with self._disk_lock:
                self.disk_bytes = max(0, self.disk_bytes - freed)
        return deleted

    def sweep(self, max_age_s: float, max_bytes: int, orphan_age_s: float = 3600.0) -> list[str]:
        """The retention policy: delete finished jobs older than `max_age_s`; then, while the job files take
        more than `max_bytes`, the oldest finished jobs; and folders without a row (a crash mid-delete) once
        older than `orphan_age_s` (younger ones may be uploads whose row is being written). Queued and running
        jobs are never touched. Measures `disk_bytes` again; returns the ids deleted."""
        now = time.time()
        with self._read() as db:
            rows = db.execute(
                sa.select(_J.id, _J.updated_at)
                .where(_J.state.in_([s.value for s in FINISHED]))
                .order_by(_J.updated_at)
            ).all()
            known = set(db.execute(sa.select(_J.id)).scalars())
        sizes = {p.name: _tree_bytes(p) for p in self.jobs_dir.iterdir() if p.is_dir()}
        total = sum(sizes.values())
        deleted: list[str] = []
        for row in rows:
            if row.updated_at < now - max_age_s or total > max_bytes:
                if self.delete(row.id):
                    deleted.append(row.id)
                    total -= sizes.get(row.id, 0)
        for name, size in sizes.items():
            path = self.jobs_dir / name
            if name not in known and name not in deleted and path.exists():
                if path.stat().st_mtime < now - orphan_age_s:
                    shutil.rmtree(path, ignore_errors=True)
                    total -= size
        with self._disk_lock:
            self.disk_bytes = sum(_tree_bytes(p) for p in self.jobs_dir.iterdir() if p.is_dir())
        if deleted:
            logger.info(
                "retention: deleted %d finished jobs; job files now %d bytes", len(deleted), self.disk_bytes
            )
        return deleted

    def get(self, job_id: str) -> Job | None:
        with self._read() as db:
            row = db.execute(sa.select(jobs_table).where(_J.id == job_id)).first()
        return self._row(row) if row else None

    def list_jobs(
        self, limit: int, after: str | None = None, states: Sequence[JobState] = ()
    ) -> tuple[list[Job], bool]:
        """Up to `limit` jobs, newest first (by creation, then id), those after the job `after` in that order
        when given, only those in `states` when given; and whether more follow. `UnknownCursor` if `after`
        names no job."""
        query = sa.select(jobs_table)
        if states:
            query = query.where(_J.state.in_([str(s) for s in states]))
        with self._read() as db:
            if after is not None:
                created = db.execute(sa.select(_J.created_at).where(_J.id == after)).scalar_one_or_none()
                if created is None:
                    raise UnknownCursor(after)
                query = query.where(
                    sa.or_(_J.created_at < created, sa.and_(_J.created_at == created, _J.id < after))
                )
            rows = db.execute(query.order_by(_J.created_at.desc(), _J.id.desc()).limit(limit + 1)).all()
        return [self._row(r) for r in rows[:limit]], len(rows) > limit

    def counts(self) -> dict[str, int]:
        with self._read() as db:
            rows = db.execute(sa.select(_J.state, sa.func.count()).group_by(_J.state)).all()
        counts = {s.value: 0 for s in JobState}
        counts.update({state: n for state, n in rows})
        return counts

    def claim_next(self) -> Job | None:
        """Mark the oldest queued job running (one more attempt), owned by this store with a fresh heartbeat,
        and return it; None if the queue is empty. Exactly once across stores: on PostgreSQL the row is selected
        `FOR UPDATE SKIP LOCKED` and updated in the same transaction; on SQLite the transaction holds the
        write lock from its start."""
        pick = (
            sa.select(_J.id).where(_J.state == JobState.queued.value).order_by(_J.created_at, _J.id).limit(1)
        )
        if self.is_postgres:
            pick = pick.with_for_update(skip_locked=True)
        with self._write() as db:
            job_id = db.execute(pick).scalar_one_or_none()
            if job_id is None:
                return None
            claimed = db.execute(
                jobs_table.update()
                .where(_J.id == job_id, _J.state == JobState.queued.value)
                .values(
                    state=JobState.running.value,
                    attempts=_J.attempts + 1,
                    updated_at=time.time(),
                    owner=self.owner,
                    heartbeat_at=self._now(),
                )
            ).rowcount
            if claimed != 1:
                return None
        return self.get(job_id)

    def heartbeat(self, job_id: str) -> bool:
        """Renew this store's lease on a running job; False if the job is no longer its own (taken over,
        finished, deleted)."""
        with self._write() as db:
            result = db.execute(
                jobs_table.update()
                .where(_J.id == job_id, _J.owner == self.owner, _J.state == JobState.running.value)
                .values(heartbeat_at=self._now())
            )
        return result.rowcount == 1

    def owns(self, job_id: str) -> bool:
        """Whether this store may still write the job as its runner."""
        with self._read() as db:
            return db.execute(sa.select(_J.id).where(_J.id == job_id, self._mine())).first() is not None

    def set_progress(self, job_id: str, progress: dict[str, dict[str, int]]) -> bool:
        """Record a run's progress; False (nothing written) if the job is no longer this store's."""
        with self._write() as db:
            result = db.execute(
                jobs_table.update()
                .where(_J.id == job_id, self._mine())
                .values(progress=json.dumps(progress), updated_at=time.time())
            )
        return result.rowcount == 1

    def finish(
        self, job_id: str, state: JobState, error: str | None = None, warnings: list[str] | None = None
    ) -> bool:
        """Record how a run ended; False (nothing written) if the job is no longer this store's."""
        with self._write() as db:
            result = db.execute(
                jobs_table.update()
                .where(_J.id == job_id, self._mine())
                .values(
                    state=str(state),
                    error=error,
                    warnings=json.dumps(warnings) if warnings else None,
                    updated_at=time.time(),
                )
            )
        return result.rowcount == 1

    def requeue(self, job_id: str) -> bool:
        """Put a job interrupted by a shutdown back in the queue; that run does not count as an attempt. False
        (nothing written) if the job is no longer this store's."""
        with self._write() as db:
            result = db.execute(
                jobs_table.update()
                .where(_J.id == job_id, self._mine())
                .values(
                    state=JobState.queued.value,
                    attempts=sa.case((_J.attempts > 0, _J.attempts - 1), else_=0),
                    updated_at=time.time(),
                )
            )
        return result.rowcount == 1

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job at once; ask a running one to stop at its next batch. None if unknown."""
        with self._write() as db:
            db.execute(
                jobs_table.update()
                .where(_J.id == job_id, _J.state == JobState.queued.value)
                .values(state=JobState.canceled.value, updated_at=time.time())
            )
            db.execute(
                jobs_table.update()
                .where(_J.id == job_id, _J.state == JobState.running.value)
                .values(cancel_requested=1, updated_at=time.time())
            )
        return self.get(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        with self._read() as db:
            flag = db.execute(sa.select(_J.cancel_requested).where(_J.id == job_id)).scalar_one_or_none()
        return bool(flag)

    def recover(self, max_attempts: int, lease_s: float | None = None) -> tuple[int, int]:
        """Jobs left `running` by a run that died go back to the queue, or fail once they used `max_attempts`
        runs (canceled if a cancel was asked). Without `lease_s` (the embedded store at startup) every running
        job is recovered; with it, only those whose heartbeat is older than `lease_s` seconds (their replica was
        killed, or lost the database), so jobs other replicas run are left alone.

        Returns (requeued, failed). The dead runs' partial result folders are removed either way."""
        stale = _J.state == JobState.running.value
        if lease_s is not None:
            stale = sa.and_(stale, sa.or_(_J.heartbeat_at.is_(None), _J.heartbeat_at < self._now() - lease_s))
        pick = sa.select(_J.id, _J.attempts, _J.cancel_requested, _J.owner).where(stale)
        if self.is_postgres:
            pick = pick.with_for_update(skip_locked=True)
        requeued = failed = 0
        recovered: list[Any] = []  # rows (id, attempts, cancel_requested, owner)
        with self._write() as db:
            for row in db.execute(pick).all():
                if row.cancel_requested:
                    values: dict[str, Any] = {"state": JobState.canceled.value}
                elif row.attempts >= max_attempts:
                    values = {
                        "state": JobState.failed.value,
                        "error": f"interrupted {row.attempts} times (server stopped mid-run); not retried",
                    }
                else:
                    values = {"state": JobState.queued.value}
                # the owner stays: that run's late writes are refused (see _mine) until another claim
                changed = db.execute(
                    jobs_table.update()
                    .where(_J.id == row.id, _J.state == JobState.running.value)
                    .values(**values, updated_at=time.time())
                ).rowcount
                if changed == 1:
                    recovered.append(row)
                    failed += values["state"] == JobState.failed.value
                    requeued += values["state"] == JobState.queued.value
        for row in recovered:
            job_dir = self.job_dir(row.id)
            if lease_s is None:  # nothing else runs: every partial folder is a dead run's
                partials = list(job_dir.glob(f"{_PARTIAL}*"))
            else:
                partials = [job_dir / _PARTIAL, job_dir / f"{_PARTIAL}-{row.owner}"]
            for path in partials:
                shutil.rmtree(path, ignore_errors=True)
        if recovered:
            logger.warning(
                "recovered %d interrupted jobs: %d requeued, %d failed", len(recovered), requeued, failed
            )
        return requeued, failed

    def write_result(self, job_id: str, files: dict[str, bytes]) -> bool:
        """Write all result files into this run's own partial folder, then, if the job is still this store's,
        make them visible at once by renaming the folder; False (nothing visible) if it was taken over."""
        job_dir = self.job_dir(job_id)
        partial, final = job_dir / f"{_PARTIAL}-{self.owner}", job_dir / "result"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            partial.mkdir(parents=True)
            for name, data in files.items():
                atomic_write_bytes(partial / name, data)
        except OSError:  # e.g. the disk is full: nothing half-written stays behind
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if not self.owns(job_id):
            shutil.rmtree(partial, ignore_errors=True)
            return False
        shutil.rmtree(final, ignore_errors=True)  # a previous run that crashed after its rename
        os.replace(partial, final)
        fd = os.open(job_dir, os.O_RDONLY)
        try:
            os.fsync(fd)  # make the rename itself durable
        finally:
            os.close(fd)
        with self._disk_lock:
            self.disk_bytes += sum(len(d) for d in files.values())
        return True

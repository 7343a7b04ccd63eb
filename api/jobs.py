"""Asynchronous jobs: a SQLite table of jobs, their inputs and results as files, and one worker thread.

Durability rules: the upload is written (atomically) before its row exists; results are written into a
`result.partial/` folder that is renamed to `result/` in one step before the row says `succeeded`. After a
crash, `recover()` puts jobs left `running` back in the queue (or fails them after `max_attempts` runs), so a
job is never left half-written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from api.engine import Engine, Stopped, user_error_detail
from api.schemas import OutputFormat
from pipeline.outputs import zip_outputs
from pipeline.utils import UserError, atomic_write_bytes
from pipeline.world_model import WorldModelOutput

logger = logging.getLogger(__name__)

STAGES = ("decode", "caption", "predict", "render", "encode")
RESULT_JSON, RESULT_MP4, RESULT_ZIP = "result.json", "result.mp4", "result.zip"


class JobState(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    canceled = "canceled"


FINISHED = (JobState.succeeded, JobState.failed, JobState.canceled)


@dataclass(frozen=True)
class JobParams:
    """What a clip is run with: the form fields of /v1/predict and /v1/jobs, stored as JSON with each job."""

    horizon: int = 8
    stride: int | None = None
    state_rate: float | None = None
    seed: int | None = 0
    steps: int | None = None
    guidance: float | None = None
    output: OutputFormat = OutputFormat.json
    actions: list[str | None] | None = (
        None  # a predictor with actions: after each state, then each forecast step
    )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "output": self.output.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobParams:
        known = {k: v for k, v in data.items() if k in {f.name for f in fields(cls)}}
        return cls(**{**known, "output": OutputFormat(known.get("output", "json"))})

    def pipeline_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `WorldModelPipeline.__call__` these parameters set."""
        return {k: v for k, v in asdict(self).items() if k != "output"}


@dataclass
class Job:
    id: str
    state: JobState
    created_at: float
    updated_at: float
    params: JobParams
    progress: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str | None = None
    attempts: int = 0
    cancel_requested: bool = False
    filename: str | None = None
    warnings: list[str] = field(
        default_factory=list
    )  # the finished call's (e.g. a clip the models do not know)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    params TEXT NOT NULL,
    progress TEXT NOT NULL,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    filename TEXT,
    warnings TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created_at);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at, id);
"""


class UnknownCursor(LookupError):
    """`after` names no job (never, or deleted since the page that gave it)."""


class QueueFull(Exception):
    """The queue already holds `max_queue` jobs."""

    def __init__(self, max_queue: int) -> None:
        super().__init__(f"the queue is full ({max_queue} jobs)")
        self.max_queue = max_queue


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
    """Jobs in `data_dir/jobs.sqlite3`; each job's files in `data_dir/jobs/<id>/`. Safe across threads."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.jobs_dir = self.data_dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.data_dir / "jobs.sqlite3"
        with self._db() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
            if "warnings" not in columns:  # a store written before jobs carried their warnings
                db.execute("ALTER TABLE jobs ADD COLUMN warnings TEXT")
        self._disk_lock = threading.Lock()
        self.disk_bytes = sum(_tree_bytes(p) for p in self.jobs_dir.iterdir() if p.is_dir())

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        # One short-lived connection per operation: simple, and safe from any thread.
        db = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("PRAGMA synchronous=FULL")
            yield db
        finally:
            db.close()

    @staticmethod
    def _row(row: sqlite3.Row) -> Job:
        return Job(
            id=row["id"],
            state=JobState(row["state"]),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            params=JobParams.from_dict(json.loads(row["params"])),
            progress=json.loads(row["progress"]),
            error=row["error"],
            attempts=row["attempts"],
            cancel_requested=bool(row["cancel_requested"]),
            filename=row["filename"],
            warnings=json.loads(row["warnings"]) if row["warnings"] else [],
        )

    def job_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    def input_path(self, job_id: str) -> Path:
        return self.job_dir(job_id) / "input"

    def result_path(self, job_id: str, name: str) -> Path:
        return self.job_dir(job_id) / "result" / name

    def create(
        self, data: bytes, params: JobParams, filename: str | None = None, max_queue: int | None = None
    ) -> Job:
        """Store the input, then queue the job. With `max_queue`, admission is atomic: the count of queued
        jobs and the insert happen in one write transaction, so the queue never holds more than `max_queue`
        (`QueueFull` otherwise, and the input is removed). Blocking (fsync): call it off the event loop."""
        job_id = uuid.uuid4().hex
        atomic_write_bytes(self.input_path(job_id), data)  # the file first: a row never points at nothing
        now = time.time()
        progress = {s: {"done": 0, "total": 0} for s in STAGES}
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            if max_queue is not None:
                (queued,) = db.execute(
                    "SELECT COUNT(*) FROM jobs WHERE state = ?", (JobState.queued,)
                ).fetchone()
                if queued >= max_queue:
                    db.execute("ROLLBACK")
                    shutil.rmtree(self.job_dir(job_id), ignore_errors=True)
                    raise QueueFull(max_queue)
            db.execute(
                "INSERT INTO jobs (id, state, created_at, updated_at, params, progress, filename) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    JobState.queued,
                    now,
                    now,
                    json.dumps(params.to_dict()),
                    json.dumps(progress),
                    filename,
                ),
            )
            db.execute("COMMIT")
        with self._disk_lock:
            self.disk_bytes += len(data)
        job = self.get(job_id)
        assert job is not None
        return job

    def delete(self, job_id: str) -> bool:
        """Remove a job that is not running (queued or finished): its row first (it is gone for readers and the
        worker at once), then its files. False if the job is unknown or running. A crash between the two
        leaves files that the retention sweep removes."""
        with self._db() as db:
            cur = db.execute("DELETE FROM jobs WHERE id = ? AND state != ?", (job_id, JobState.running))
            deleted = cur.rowcount == 1
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
        with self._db() as db:
            rows = db.execute(
                f"SELECT id, updated_at FROM jobs WHERE state IN ({', '.join('?' * len(FINISHED))}) "
                "ORDER BY updated_at",
                FINISHED,
            ).fetchall()
            known = {r["id"] for r in db.execute("SELECT id FROM jobs").fetchall()}
        sizes = {p.name: _tree_bytes(p) for p in self.jobs_dir.iterdir() if p.is_dir()}
        total = sum(sizes.values())
        deleted: list[str] = []
        for row in rows:
            if row["updated_at"] < now - max_age_s or total > max_bytes:
                if self.delete(row["id"]):
                    deleted.append(row["id"])
                    total -= sizes.get(row["id"], 0)
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
        with self._db() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(row) if row else None

    def list_jobs(
        self, limit: int, after: str | None = None, states: Sequence[JobState] = ()
    ) -> tuple[list[Job], bool]:
        """Up to `limit` jobs, newest first (by creation, then id), those after the job `after` in that order
        when given, only those in `states` when given; and whether more follow. `UnknownCursor` if `after`
        names no job."""
        where: list[str] = []
        args: list[object] = []
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args += [str(s) for s in states]
        with self._db() as db:
            if after is not None:
                row = db.execute("SELECT created_at FROM jobs WHERE id = ?", (after,)).fetchone()
                if row is None:
                    raise UnknownCursor(after)
                where.append("(created_at < ? OR (created_at = ? AND id < ?))")
                args += [row["created_at"], row["created_at"], after]
            rows = db.execute(
                "SELECT * FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
                + " ORDER BY created_at DESC, id DESC LIMIT ?",
                (*args, limit + 1),
            ).fetchall()  # fmt: skip
        return [self._row(r) for r in rows[:limit]], len(rows) > limit

    def counts(self) -> dict[str, int]:
        with self._db() as db:
            rows = db.execute("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state").fetchall()
        counts = {s.value: 0 for s in JobState}
        counts.update({r["state"]: r["n"] for r in rows})
        return counts

    def claim_next(self) -> Job | None:
        """Mark the oldest queued job running (one more attempt) and return it; None if the queue is empty."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT id FROM jobs WHERE state = ? ORDER BY created_at LIMIT 1", (JobState.queued,)
            ).fetchone()
            if row is None:
                db.execute("COMMIT")
                return None
            db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (JobState.running, time.time(), row["id"]),
            )
            db.execute("COMMIT")
        return self.get(row["id"])

    def set_progress(self, job_id: str, progress: dict[str, dict[str, int]]) -> None:
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET progress = ?, updated_at = ? WHERE id = ?",
                (json.dumps(progress), time.time(), job_id),
            )

    def finish(self, job_id: str, state: JobState, error: str | None = None, warnings: list[str] | None = None
               ) -> None:  # fmt: skip
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET state = ?, error = ?, warnings = ?, updated_at = ? WHERE id = ?",
                (state, error, json.dumps(warnings) if warnings else None, time.time(), job_id),
            )

    def requeue(self, job_id: str) -> None:
        """Put a job interrupted by a shutdown back in the queue; that run does not count as an attempt."""
        with self._db() as db:
            db.execute(
                "UPDATE jobs SET state = ?, attempts = MAX(attempts - 1, 0), updated_at = ? WHERE id = ?",
                (JobState.queued, time.time(), job_id),
            )

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a queued job at once; ask a running one to stop at its next batch. None if unknown."""
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                (JobState.canceled, time.time(), job_id, JobState.queued),
            )
            db.execute(
                "UPDATE jobs SET cancel_requested = 1, updated_at = ? WHERE id = ? AND state = ?",
                (time.time(), job_id, JobState.running),
            )
            db.execute("COMMIT")
        return self.get(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        with self._db() as db:
            row = db.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def recover(self, max_attempts: int) -> tuple[int, int]:
        """After a crash: jobs left `running` go back to the queue, or fail once they used `max_attempts` runs.

        Returns (requeued, failed). Partial result folders are removed either way.
        """
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            stuck = db.execute(
                "SELECT id, attempts, cancel_requested FROM jobs WHERE state = ?", (JobState.running,)
            ).fetchall()
            requeued = failed = 0
            for row in stuck:
                if row["cancel_requested"]:
                    db.execute(
                        "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?",
                        (JobState.canceled, time.time(), row["id"]),
                    )
                elif row["attempts"] >= max_attempts:
                    db.execute(
                        "UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                        (
                            JobState.failed,
                            f"interrupted {row['attempts']} times (server stopped mid-run); not retried",
                            time.time(),
                            row["id"],
                        ),
                    )
                    failed += 1
                else:
                    db.execute(
                        "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?",
                        (JobState.queued, time.time(), row["id"]),
                    )
                    requeued += 1
            db.execute("COMMIT")
        for row in stuck:
            shutil.rmtree(self.job_dir(row["id"]) / "result.partial", ignore_errors=True)
        if stuck:
            logger.warning(
                "recovered %d interrupted jobs: %d requeued, %d failed", len(stuck), requeued, failed
            )
        return requeued, failed

    def write_result(self, job_id: str, files: dict[str, bytes]) -> None:
        """Write all result files, then make them visible at once by renaming the folder."""
        job_dir = self.job_dir(job_id)
        partial, final = job_dir / "result.partial", job_dir / "result"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        for name, data in files.items():
            atomic_write_bytes(partial / name, data)
        shutil.rmtree(final, ignore_errors=True)  # a previous run that crashed after its rename
        os.replace(partial, final)
        fd = os.open(job_dir, os.O_RDONLY)
        try:
            os.fsync(fd)  # make the rename itself durable
        finally:
            os.close(fd)
        with self._disk_lock:
            self.disk_bytes += sum(len(d) for d in files.values())


class JobWorker:
    """One thread that runs queued jobs through the engine, in order, and records progress and results."""

    def __init__(
        self,
        store: JobStore,
        engine: Engine,
        *,
        job_timeout_s: float,
        result_payload: Any,
        poll_s: float = 0.5,
        retention: tuple[float, int] | None = None,
        sweep_s: float = 60.0,
    ) -> None:
        self.store = store
        self.engine = engine
        self.job_timeout_s = job_timeout_s
        self.result_payload = result_payload  # (output, params) -> JSON-able dict
        self.poll_s = poll_s
        self.retention = retention  # (max age in seconds, max bytes) of finished jobs, swept between jobs
        self.sweep_s = sweep_s
        self._last_sweep = float("-inf")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="semworld-jobs", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        self._wake.set()

    def sweep(self) -> None:
        """Apply the retention policy now (also run between jobs, every `sweep_s` seconds)."""
        self._last_sweep = time.monotonic()
        if self.retention is not None:
            try:
                self.store.sweep(*self.retention)
            except (OSError, sqlite3.Error):
                logger.exception("retention sweep failed")

    def _loop(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._last_sweep > self.sweep_s:
                self.sweep()
            try:
                job = self.store.claim_next()
            except sqlite3.Error:
                logger.exception("job store unavailable")
                job = None
            if job is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            self.run(job)

    def run(self, job: Job) -> None:
        logger.info("job %s: run %d", job.id, job.attempts)
        progress = {s: {"done": 0, "total": 0} for s in STAGES}
        stop = threading.Event()
        deadline = time.monotonic() + self.job_timeout_s
        last_write = [0.0]
        last_cancel_check = [0.0]

        def callback(stage: str, done: int, total: int) -> None:
            progress[stage] = {"done": done, "total": total}
            now = time.monotonic()
            if now - last_write[0] > 0.2 or done == total:
                self.store.set_progress(job.id, progress)
                last_write[0] = now
            if self._stop.is_set():
                raise Stopped("shutdown")
            if now > deadline:
                raise Stopped("timeout")
            # The callback runs per decoded frame and denoising step: ask the database at most every 50 ms.
            if now - last_cancel_check[0] > 0.05:
                last_cancel_check[0] = now
                if self.store.cancel_requested(job.id):
                    raise Stopped("canceled")

        params = job.params

        def work(_cb: object) -> WorldModelOutput:
            # The clip goes in as an open file, not a path: an error about it must not show the server's folders.
            with self.store.input_path(job.id).open("rb") as clip:
                return self.engine.pipeline(
                    clip, **params.pipeline_kwargs(), encode_video=True, callback=callback
                )

        try:
            output: WorldModelOutput = self.engine.call(work, stop, deadline)
            payload = self.result_payload(output, params)
            files = {RESULT_JSON: json.dumps(payload).encode(), RESULT_ZIP: zip_outputs(output)}
            if output.video is not None:
                files[RESULT_MP4] = output.video
            self.store.write_result(job.id, files)
            self.store.set_progress(job.id, progress)
            self.store.finish(job.id, JobState.succeeded, warnings=list(output.warnings))
            self.engine.metrics.observe_timings(output.timings)
            self.engine.metrics.predictions.labels("job", "ok").inc()
            logger.info("job %s: succeeded in %.2f s", job.id, output.timings.get("total", 0.0))
        except Stopped as stopped:
            if stopped.reason == "shutdown":
                self.store.requeue(job.id)
                logger.info("job %s: interrupted by shutdown, back in the queue", job.id)
            elif stopped.reason == "canceled":
                self.store.finish(job.id, JobState.canceled)
                self.engine.metrics.predictions.labels("job", "canceled").inc()
            else:
                self.store.finish(job.id, JobState.failed, f"timed out after {self.job_timeout_s:g} s")
                self.engine.metrics.predictions.labels("job", "timeout").inc()
        except (UserError, ValueError) as err:
            self.store.finish(job.id, JobState.failed, user_error_detail(err))
            self.engine.metrics.predictions.labels("job", "bad_input").inc()
        except Exception:
            logger.exception("job %s failed", job.id)
            self.store.finish(job.id, JobState.failed, "internal error while running the job")
            self.engine.metrics.predictions.labels("job", "error").inc()

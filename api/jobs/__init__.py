"""Asynchronous jobs: a table of jobs (embedded SQLite, or PostgreSQL shared by replicas), their inputs and
results as files, and one worker thread per process.

Durability rules: the upload is written (atomically) before its row exists; results are written into a
`result.partial-<owner>/` folder that is renamed to `result/` in one step before the row says `succeeded`. After
a crash, `recover()` puts jobs left `running` back in the queue (or fails them after `max_attempts` runs), so a
job is never left half-written. With several replicas, a claimed job carries its owner and a heartbeat: jobs
whose heartbeat stops (their replica was killed) are recovered the same way once the lease expires.

The modules: `model` (the job types and shared helpers, no database), `db` (the table, the engines, what a
database error means), `store` (`JobStore`: the queries, files, leases and migrations) and `worker`
(`JobWorker`: the thread that runs jobs). Everything used outside the package is imported from here.
"""

from api.jobs.db import jobs_table, metadata, short_reason, store_unavailable
from api.jobs.model import (
    DISK_FULL,
    FINISHED,
    RESULT_JSON,
    RESULT_MP4,
    RESULT_ZIP,
    STAGES,
    Job,
    JobParams,
    JobState,
    QueueFull,
    UnknownCursor,
    disk_full,
    free_mb,
)
from api.jobs.store import MIGRATIONS_DIR, JobStore
from api.jobs.worker import JobWorker

__all__ = [
    "DISK_FULL",
    "FINISHED",
    "MIGRATIONS_DIR",
    "RESULT_JSON",
    "RESULT_MP4",
    "RESULT_ZIP",
    "STAGES",
    "Job",
    "JobParams",
    "JobState",
    "JobStore",
    "JobWorker",
    "QueueFull",
    "UnknownCursor",
    "disk_full",
    "free_mb",
    "jobs_table",
    "metadata",
    "short_reason",
    "store_unavailable",
]

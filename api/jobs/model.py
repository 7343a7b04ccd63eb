"""The job model: a job's states, parameters and record, the names of its result files, and the small
helpers the store, the worker and the routes share about jobs (a full disk, a full queue, an unknown cursor).
It imports neither the database nor the engine.
"""

from __future__ import annotations

import errno
import shutil
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from api.schemas import OutputFormat

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
    owner: str | None = None  # the store that runs the job, or ran it last


DISK_FULL = "no space left on the data disk: the job's results could not be written"


def disk_full(err: OSError) -> bool:
    """Whether an OSError says the disk (or the user's quota on it) is full."""
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


def free_mb(folder: Path) -> float:
    """Free space of the filesystem that holds `folder` (or would, once made), in MB (MiB)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return shutil.disk_usage(folder).free / 2**20


class UnknownCursor(LookupError):
    """`after` names no job (never, or deleted since the page that gave it)."""


class QueueFull(Exception):
    """The queue already holds `max_queue` jobs."""

    def __init__(self, max_queue: int) -> None:
        super().__init__(f"the queue is full ({max_queue} jobs)")
        self.max_queue = max_queue

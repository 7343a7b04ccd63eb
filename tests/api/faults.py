"""Faults injected from the tests into a server subprocess (a SEMWORLD_PIPELINE_FACTORY target): the library
code has no hooks for them. `FAULT=result-write` makes the server SIGKILL itself halfway through writing the
second file of a job's result, after the first is complete, as a power cut would."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import api.jobs.store
from pipeline.utils import atomic_write_bytes
from pipeline.world_model import WorldModelPipeline
from tests.fakes import make_pipeline as make_stand_in


def _dying_write(path: str | Path, data: bytes) -> None:
    path = Path(path)
    if not path.parent.name.startswith("result.partial") or not any(path.parent.iterdir()):
        atomic_write_bytes(path, data)  # job inputs, and the first result file, are written whole
        return
    fd, _tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.write(fd, data[: len(data) // 2])
    os.fsync(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def make_pipeline() -> WorldModelPipeline:
    if os.environ.get("FAULT") == "result-write":
        api.jobs.store.atomic_write_bytes = _dying_write  # type: ignore[assignment]
    return make_stand_in()

"""The one pipeline of this process and the rules for using it: one model call at a time, off the event loop,
with a deadline that stops the model within one batch or one denoising step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from api.metrics import Metrics
from pipeline.interfaces import ProgressCallback
from pipeline.video import VideoError
from pipeline.world_model import WorldModelPipeline

logger = logging.getLogger(__name__)
T = TypeVar("T")


UPLOAD_FIELD = "file"  # the form field of the clip in /v1/predict and /v1/jobs


def user_error_detail(err: ValueError) -> str:
    """A user error as a client reads it: a problem with the uploaded clip (a VideoError: unreadable, empty,
    past a limit) after the clip's form field, as every upload error is ("file: not a readable video")."""
    return f"{UPLOAD_FIELD}: {err}" if isinstance(err, VideoError) else str(err)


class Busy(Exception):
    """Too many synchronous requests already running or waiting."""


class Stopped(Exception):
    """A run was stopped between batches or denoising steps: canceled, past its deadline, or shutting down."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Engine:
    """Owns the pipeline. `lock` serialises model work (one process, one GPU, one worker)."""

    def __init__(self, pipeline: WorldModelPipeline, metrics: Metrics, max_sync_waiting: int) -> None:
        self.pipeline = pipeline
        self.metrics = metrics
        self.lock = threading.Lock()
        self.ready = False
        self.warmup_seconds: float | None = None
        self._sync_slots = threading.BoundedSemaphore(max_sync_waiting)

    def warmup(self) -> None:
        t = time.perf_counter()
        with self.lock:
            self.pipeline.warmup()
        self.warmup_seconds = time.perf_counter() - t
        logger.info("pipeline warmed up in %.2f s", self.warmup_seconds)

    def call(
        self,
        work: Callable[[ProgressCallback], T],
        stop: threading.Event,
        deadline: float,
        measure_overrun: bool = False,
    ) -> T:
        """Run `work(callback)` under the lock; the callback raises `Stopped` once `stop` is set or the
        monotonic `deadline` has passed (it runs between batches and after every denoising step).

        With `measure_overrun`, a run that held the model records how long it stayed busy past the deadline
        (0 when in time), in seconds and in units of its last unit of work (the denoising step or batch that
        was running when the deadline passed)."""
        ticks = [0.0, 0.0]  # the last two callback times: their gap is the unit of work in progress

        def callback(stage: str, done: int, total: int) -> None:
            ticks[0], ticks[1] = ticks[1], time.monotonic()
            if stop.is_set():
                raise Stopped("stopped")
            if ticks[1] > deadline:
                raise Stopped("timeout")

        if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise Stopped("timeout")
        ticks[1] = time.monotonic()
        try:
            if stop.is_set():
                raise Stopped("stopped")
            return work(callback)
        finally:
            self.lock.release()
            if measure_overrun:
                overrun = max(0.0, time.monotonic() - deadline)
                self.metrics.observe_overrun(overrun, ticks[1] - ticks[0] if overrun else None)

    async def run_sync(self, work: Callable[[ProgressCallback], T], timeout_s: float, entry: str) -> T:
        """Run model work for a synchronous request in a thread; `Busy` if too many wait, `TimeoutError` past
        `timeout_s` (the work is then stopped at its next batch)."""
        if not self._sync_slots.acquire(blocking=False):
            raise Busy()
        stop = threading.Event()
        deadline = time.monotonic() + timeout_s

        def run() -> T:
            try:
                return self.call(work, stop, deadline, measure_overrun=True)
            finally:
                self._sync_slots.release()

        try:
            result = await asyncio.wait_for(asyncio.to_thread(run), timeout_s)
        except (TimeoutError, Stopped):
            stop.set()
            self.metrics.predictions.labels(entry, "timeout").inc()
            raise TimeoutError(f"the request took longer than {timeout_s:g} s") from None
        except BaseException:
            stop.set()
            self.metrics.predictions.labels(entry, "error").inc()
            raise
        self.metrics.predictions.labels(entry, "ok").inc()
        return result

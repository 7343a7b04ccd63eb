"""The job worker: one thread per process that claims queued jobs from the store and runs them through the
engine, in order, keeping each run's lease alive with a heartbeat thread, recording progress, results and
how the run ended, and between jobs applying the retention policy and recovering jobs whose lease expired.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from api.engine import Engine, Stopped, user_error_detail
from api.jobs.db import short_reason, store_unavailable
from api.jobs.model import DISK_FULL, RESULT_JSON, RESULT_MP4, RESULT_ZIP, STAGES, Job, JobState, disk_full
from api.jobs.store import JobStore
from pipeline.outputs import zip_outputs
from pipeline.utils import UserError
from pipeline.world_model import WorldModelOutput

logger = logging.getLogger("api.jobs")  # one logger for the package: its log lines keep one name


class JobWorker:
    """One thread that runs queued jobs through the engine, in order, and records progress and results.

    While a job runs, a heartbeat thread renews its lease every `heartbeat_s`; a run that finds its job taken
    over stops and writes nothing more. With `lease_s`, between jobs the worker also recovers running jobs whose
    lease expired (their replica died): back in the queue, or failed after `max_attempts` runs."""

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
        lease_s: float | None = None,
        heartbeat_s: float = 5.0,
        max_attempts: int = 2,
    ) -> None:
        self.store = store
        self.engine = engine
        self.job_timeout_s = job_timeout_s
        self.result_payload = result_payload  # (output, params) -> JSON-able dict
        self.poll_s = poll_s
        self.retention = retention  # (max age in seconds, max bytes) of finished jobs, swept between jobs
        self.sweep_s = sweep_s
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.max_attempts = max_attempts
        self._last_sweep = float("-inf")
        self._last_reclaim = float("-inf")
        self._store_down = False
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
            except SQLAlchemyError as err:
                self._store_failed(err)
            except OSError:
                logger.exception("retention sweep failed")

    def reclaim(self) -> None:
        """Recover the running jobs whose lease expired (also run between jobs, every `heartbeat_s`)."""
        self._last_reclaim = time.monotonic()
        if self.lease_s is not None:
            try:
                self.store.recover(self.max_attempts, lease_s=self.lease_s)
            except SQLAlchemyError as err:
                self._store_failed(err)

    def _store_failed(self, err: SQLAlchemyError) -> None:
        if not store_unavailable(err):
            logger.error("job store error", exc_info=err)
        elif not self._store_down:  # once per outage, not once per poll
            self._store_down = True
            logger.warning("job store unavailable: %s; retrying", short_reason(err))

    def _loop(self) -> None:
        while not self._stop.is_set():
            if time.monotonic() - self._last_sweep > self.sweep_s:
                self.sweep()
            if time.monotonic() - self._last_reclaim > self.heartbeat_s:
                self.reclaim()
            try:
                job = self.store.claim_next()
            except SQLAlchemyError as err:
                self._store_failed(err)
                job = None
            else:
                if self._store_down:
                    self._store_down = False
                    logger.info("job store reachable again")
            if job is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            self.run(job)

    def _record(self, write: Callable[..., bool], *args: Any, **kwargs: Any) -> bool:
        """A write that ends a run, retried while the database is unreachable (until the worker stops: the
        job then stays running, and its lease or the next startup's recovery puts it back in the queue)."""
        delay = self.poll_s
        while True:
            try:
                return write(*args, **kwargs)
            except SQLAlchemyError as err:
                self._store_failed(err)
                if not store_unavailable(err) or self._stop.wait(delay):
                    return False
                delay = min(2 * delay, 5.0)

    def _heartbeat(self, job_id: str, done: threading.Event, lost: threading.Event) -> None:
        while not done.wait(self.heartbeat_s):
            try:
                if not self.store.heartbeat(job_id):
                    if not done.is_set():
                        logger.warning(
                            "job %s: lease lost (taken over or deleted); stopping this run", job_id
                        )
                        lost.set()
                    return
            except SQLAlchemyError as err:
                self._store_failed(err)
            except Exception:  # never a silent end: a dead heartbeat would let the live run be taken over
                logger.exception("job %s: heartbeat failed; retrying", job_id)

    def run(self, job: Job) -> None:
        logger.info("job %s: run %d", job.id, job.attempts)
        done, lost = threading.Event(), threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(job.id, done, lost), name="semworld-heartbeat", daemon=True
        )
        beat.start()
        try:
            self._run(job, lost)
        finally:
            done.set()
            beat.join(timeout=self.heartbeat_s + 20)  # a beat's statement times out in 15 s

    def _progress_callback(
        self, job_id: str, progress: dict[str, dict[str, int]], deadline: float, lost: threading.Event
    ) -> Callable[[str, int, int], None]:
        """The pipeline's progress callback for one run: it records the run's progress in `progress` and the
        store (at most every 0.2 s, and at the end of each stage), and stops the run (raises `Stopped`) once its
        lease is lost, the worker stops, the deadline passes or a cancel is asked."""
        last_write = [0.0]
        last_cancel_check = [0.0]

        def callback(stage: str, done: int, total: int) -> None:
            progress[stage] = {"done": done, "total": total}
            now = time.monotonic()
            if lost.is_set():
                raise Stopped("lost")
            if now - last_write[0] > 0.2 or done == total:
                last_write[0] = now
                try:
                    if not self.store.set_progress(job_id, progress):
                        raise Stopped("lost")
                except SQLAlchemyError as err:  # progress is advisory: the run goes on
                    self._store_failed(err)
            if self._stop.is_set():
                raise Stopped("shutdown")
            if now > deadline:
                raise Stopped("timeout")
            # The callback runs per decoded frame and denoising step: ask the database at most every 50 ms.
            if now - last_cancel_check[0] > 0.05:
                last_cancel_check[0] = now
                try:
                    canceled = self.store.cancel_requested(job_id)
                except SQLAlchemyError as err:
                    self._store_failed(err)
                    canceled = False
                if canceled:
                    raise Stopped("canceled")

        return callback

    def _run(self, job: Job, lost: threading.Event) -> None:
        progress = {s: {"done": 0, "total": 0} for s in STAGES}
        stop = threading.Event()
        deadline = time.monotonic() + self.job_timeout_s
        callback = self._progress_callback(job.id, progress, deadline, lost)
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
            if not self._record(self.store.write_result, job.id, files):
                raise Stopped("lost")
            self._record(self.store.set_progress, job.id, progress)
            if not self._record(
                self.store.finish, job.id, JobState.succeeded, warnings=list(output.warnings)
            ):
                raise Stopped("lost")
            self.engine.metrics.observe_timings(output.timings)
            self.engine.metrics.predictions.labels("job", "ok").inc()
            logger.info("job %s: succeeded in %.2f s", job.id, output.timings.get("total", 0.0))
        except Stopped as stopped:
            if stopped.reason == "lost":
                logger.warning("job %s: this run's result was dropped (the job is no longer ours)", job.id)
            elif stopped.reason == "shutdown":
                self._record(self.store.requeue, job.id)
                logger.info("job %s: interrupted by shutdown, back in the queue", job.id)
            elif stopped.reason == "canceled":
                self._record(self.store.finish, job.id, JobState.canceled)
                self.engine.metrics.predictions.labels("job", "canceled").inc()
            else:
                self._record(
                    self.store.finish, job.id, JobState.failed, f"timed out after {self.job_timeout_s:g} s"
                )
                self.engine.metrics.predictions.labels("job", "timeout").inc()
        except (UserError, ValueError) as err:
            self._record(self.store.finish, job.id, JobState.failed, user_error_detail(err))
            self.engine.metrics.predictions.labels("job", "bad_input").inc()
        except OSError as err:
            if not disk_full(err):
                self._fail_internal(job)
                return
            logger.error("job %s: no space left for its results (%s)", job.id, err)
            self._record(self.store.finish, job.id, JobState.failed, DISK_FULL)
            self.engine.metrics.predictions.labels("job", "no_space").inc()
        except Exception:
            self._fail_internal(job)

    def _fail_internal(self, job: Job) -> None:
        logger.exception("job %s failed", job.id)
        self._record(self.store.finish, job.id, JobState.failed, "internal error while running the job")
        self.engine.metrics.predictions.labels("job", "error").inc()

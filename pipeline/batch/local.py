"""The local engine: clips through the stages in this process (one worker) or in N worker processes, each
loading the models once; a progress bar over clips with the stage each worker is in."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from pipeline.batch.clip import ClipResult, load_pipeline, process
from pipeline.batch.jobs import BatchSettings, ClipJob
from pipeline.placement import default_threads
from pipeline.utils import UserError
from pipeline.world_model import WorldModelPipeline

logger = logging.getLogger(__name__)

LOCK_FILE = ".semworld-batch.lock"
ResultCallback = Callable[[ClipResult], None]


# ---- one run per output folder ---------------------------------------------------------------------------------
@contextlib.contextmanager
def run_lock(out: Path, wait_s: float = 10.0) -> Iterator[Path]:
    """Hold OUT_DIR's lock for the run: a second run into the same folder waits `wait_s` seconds, then stops with
    a UserError. The lock is an flock, so it goes with the process that holds it (also on kill -9); the local
    engine's worker processes hold it shared, so a rerun cannot start while a killed run's worker still writes."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err})") from None
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(
                        f"--out {out}: another semworld batch is writing there (one run per output folder)"
                    ) from None
                time.sleep(0.2)
        # Shared from here on, so that this run's workers can hold it too; others still cannot take it.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        yield out / LOCK_FILE
    finally:
        os.close(fd)


# ---- workers ---------------------------------------------------------------------------------------------------
def worker_device(spec: str | None, index: int) -> str | None:
    """Worker `index`'s device: with several CUDA devices and no index given, workers take them in turn."""
    if spec in (None, "auto", "cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        return f"cuda:{index % torch.cuda.device_count()}"
    return spec


class _Worker:
    """The state of one spawned worker process, set by `_init_worker`: its models (loaded at its first clip), its
    index (which GPU it takes), where it reports stages, and its shared hold on the output folder's lock."""

    settings: BatchSettings
    pipe: WorldModelPipeline | None = None
    index: int = 0
    stages: Any = None  # multiprocessing queue of (worker index, clip name, stage)
    lock_fd: int | None = None


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the main process dies (kill -9 included)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _init_worker(settings: dict[str, Any], threads: int | None, counter: Any, stages: Any, lock: str) -> None:
    _die_with_parent()
    with counter.get_lock():
        _Worker.index = counter.value
        counter.value += 1
    _Worker.settings = BatchSettings.from_dict(settings)
    _Worker.stages = stages
    _Worker.lock_fd = os.open(lock, os.O_RDWR)
    fcntl.flock(_Worker.lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    if threads:
        torch.set_num_threads(threads)
    logging.basicConfig(level=logging.WARNING)


def _run_in_worker(row: dict[str, Any]) -> ClipResult:
    if _Worker.pipe is None:
        _Worker.pipe = load_pipeline(_Worker.settings, worker_device(_Worker.settings.device, _Worker.index))

    def notify(name: str, stage: str) -> None:
        with contextlib.suppress(Exception):
            _Worker.stages.put_nowait((_Worker.index, name, stage))

    return process(_Worker.pipe, ClipJob.from_row(row), _Worker.settings, notify)


# ---- the engine --------------------------------------------------------------------------------------------------
def _report(bar: tqdm, result: ClipResult, done: int, total: int, progress: bool) -> None:
    bar.update(1)
    if not progress:
        seconds = sum(result.timings.values())
        logger.info(
            "[%d/%d] %s %s %.2f s%s", done, total, result.name, result.status, seconds,
            f" ({result.error})" if result.error else "",
        )  # fmt: skip


def run_local(
    jobs: Sequence[ClipJob],
    settings: BatchSettings,
    *,
    workers: int = 1,
    threads: int | None = None,
    progress: bool = True,
    lock: Path | None = None,
    on_result: ResultCallback | None = None,
) -> list[ClipResult]:
    """Process `jobs` and return their results in the order they finished (`on_result` hears each at once).

    `threads`: torch threads per worker (default: `default_threads()`, one fewer than the usable cores, shared out).
    `threads`: torch threads per worker (default: this machine's cores shared out among the workers).
    """
    if workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    results: list[ClipResult] = []
    if not jobs:
        return results
    threads = threads or max(1, default_threads() // workers)
    bar = tqdm(total=len(jobs), desc="batch", unit="clip", disable=not progress, dynamic_ncols=True)

    def finished(result: ClipResult) -> None:
        results.append(result)
        _report(bar, result, len(results), len(jobs), progress)
        if on_result is not None:
            on_result(result)

    try:
        if workers == 1:
            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                bar.set_postfix_str("loading models")
                pipe = load_pipeline(settings, worker_device(settings.device, 0))
                for job in jobs:
                    finished(process(pipe, job, settings, lambda n, s: bar.set_postfix_str(f"{n}: {s}")))
            finally:
                torch.set_num_threads(before)
        else:
            _run_pool(jobs, settings, workers, threads, bar, lock, finished)
    finally:
        bar.close()
    return results


def _run_pool(
    jobs: Sequence[ClipJob],
    settings: BatchSettings,
    workers: int,
    threads: int,
    bar: tqdm,
    lock: Path | None,
    finished: ResultCallback,
) -> None:
    ctx = mp.get_context("spawn")
    stages = ctx.Queue()
    counter = ctx.Value("i", 0)
    lock_path = str(lock or settings.out / LOCK_FILE)
    now: dict[int, str] = {}
    initargs = (settings.to_dict(), threads, counter, stages, lock_path)
    with ProcessPoolExecutor(min(workers, len(jobs)), ctx, _init_worker, initargs) as pool:
        pending: set[Future[ClipResult]] = {pool.submit(_run_in_worker, job.to_row()) for job in jobs}
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                with contextlib.suppress(queue.Empty):
                    while True:
                        index, name, stage = stages.get_nowait()
                        now[index] = f"{name}: {stage}"
                if now:
                    bar.set_postfix_str(" | ".join(now[i] for i in sorted(now)))
                for future in done:
                    finished(future.result())  # a UserError from loading the models is raised here
        except BaseException:
            for future in pending:
                future.cancel()
            raise

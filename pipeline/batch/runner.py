"""A batch run from start to end, whichever engine does the work: hold the output folder's lock, set aside the
clips already complete, run the rest, and rebuild states.jsonl and summary.json (also when interrupted)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.batch.clip import ClipResult, check_weights, finish_run, is_complete, skipped, still_broken
from pipeline.batch.jobs import BatchSettings, ClipJob
from pipeline.batch.local import run_local, run_lock

logger = logging.getLogger(__name__)


@dataclass
class Plan:
    """The run's clips split into those complete from an earlier run (with their records) and those to do."""

    jobs: list[ClipJob]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    todo: list[ClipJob] = field(default_factory=list)


def make_plan(jobs: list[ClipJob], settings: BatchSettings) -> Plan:
    plan = Plan(jobs)
    for job in jobs:
        doc = is_complete(job, settings)
        if doc is None:
            plan.todo.append(job)
        else:
            plan.done[job.name] = doc
    return plan


@dataclass
class EngineOptions:
    """How the work is spread. Local: `workers` processes of `threads` torch threads. Ray: `ray` is True (a new
    local cluster) or an address (`auto`, `ray://host:10001`, `host:6379`); `ray_stages` sizes each stage
    (see pipeline.batch.ray.StageResources)."""

    workers: int = 1
    threads: int | None = None
    progress: bool = True
    ray: bool | str = False
    ray_stages: dict[str, Any] = field(default_factory=dict)


def run_batch(jobs: list[ClipJob], settings: BatchSettings, options: EngineOptions) -> dict[str, Any]:
    """Run the clips not yet complete; return the summary (also written to OUT/summary.json)."""
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    results: list[ClipResult] = []
    check_weights(settings)
    with run_lock(settings.out) as lock:
        plan = make_plan(jobs, settings)
        results += [skipped(j, plan.done[j.name]) for j in jobs if j.name in plan.done]
        if plan.done:
            logger.info("%d of %d clips complete from an earlier run: skipped", len(plan.done), len(jobs))
        broken = still_broken(plan.todo, settings)
        if broken:
            results += broken
            plan.todo = [j for j in plan.todo if j.name not in {r.name for r in broken}]
            logger.info("%d clips the last run could not read are unchanged: failed again without reading them",
                        len(broken))  # fmt: skip
        engine = "ray" if options.ray else "local"
        try:
            if options.ray:
                from pipeline.batch.ray import run_ray  # Ray is optional: imported only when asked for

                address = None if options.ray is True else str(options.ray)
                run_ray(
                    plan.todo, settings, address=address, stages=options.ray_stages,
                    progress=options.progress, on_result=results.append,
                )  # fmt: skip
            else:
                run_local(
                    plan.todo, settings, workers=options.workers, threads=options.threads,
                    progress=options.progress, lock=lock, on_result=results.append,
                )  # fmt: skip
        finally:
            seconds = time.perf_counter() - t0
            processed = sum(r.status == "ok" for r in results)  # clips done now, not failed or skipped
            summary = finish_run(
                jobs,
                results,
                settings,
                {
                    "engine": engine,
                    "workers": options.workers if engine == "local" else None,
                    "started": started.isoformat(timespec="seconds"),
                    "seconds": round(seconds, 3),
                    "clips_per_minute": round(60 * processed / seconds, 2) if processed and seconds else None,
                    "not_run": [j.name for j in jobs if j.name not in {r.name for r in results}],
                },
            )
    return summary

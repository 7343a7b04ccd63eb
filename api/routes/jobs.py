"""/v1/jobs: submit a clip, list the jobs, follow one's progress per stage, fetch the result, cancel it, or
delete it."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import Depends, File, HTTPException, Query, Response, UploadFile, status
from fastapi.responses import JSONResponse

from api.deps import SettingsDep, StoreDep, WorkerDep, keyed_router
from api.jobs import Job, JobParams, JobState, QueueFull, UnknownCursor
from api.jobs.model import RESULT_JSON, RESULT_MP4, RESULT_ZIP, disk_full, free_mb
from api.schemas import (
    ErrorResponse,
    JobCreatedResponse,
    JobListResponse,
    JobStatusResponse,
    OutputFormat,
    PredictResponse,
)
from api.uploads import ERROR_RESPONSES, check_params, predict_params, read_upload

router = keyed_router("/v1/jobs", "jobs")

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "no such job"}}
_ID_SHAPE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # only ids of this shape are echoed back in a 404


def status_of(job: Job) -> JobStatusResponse:
    return JobStatusResponse(
        id=job.id,
        state=job.state.value,
        progress=job.progress,  # type: ignore[arg-type]
        error=job.error,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        created_at=job.created_at,
        updated_at=job.updated_at,
        params=job.params.to_dict(),
        result_url=f"/v1/jobs/{job.id}/result" if job.state is JobState.succeeded else None,
        warnings=job.warnings,
    )


def _shown(job_id: str) -> str:
    return repr(job_id) if _ID_SHAPE.match(job_id) else "with that id (ids are 32 hex digits)"


def _job_or_404(store: StoreDep, job_id: str) -> Job:
    job = store.get(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {_shown(job_id)}")
    return job


def _queue_full(settings: SettingsDep) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"the queue is full ({settings.max_queue} jobs); retry later",
        {"Retry-After": str(settings.retry_after_s)},
    )


def _disk_full(settings: SettingsDep) -> HTTPException:
    return HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        "no space left on the data disk for another job; retry later",
        {"Retry-After": str(settings.retry_after_s)},
    )


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobCreatedResponse,
    summary="Queue a clip for prediction",
    responses=ERROR_RESPONSES,
)
async def create_job(
    response: Response,
    file: Annotated[UploadFile, File(description="the clip")],
    params: Annotated[JobParams, Depends(predict_params)],
    store: StoreDep,
    worker: WorkerDep,
    settings: SettingsDep,
) -> JobCreatedResponse:
    """Store the clip and queue it; answers at once with the job's id. Poll `status_url`, then fetch
    `result_url` (format json, mp4 or zip)."""
    check_params(settings, **params.pipeline_kwargs())
    # A cheap early answer when the queue is plainly full; the binding check is the atomic one in create().
    counts = await asyncio.to_thread(store.counts)
    if counts.get(JobState.queued, 0) >= settings.max_queue:
        raise _queue_full(settings)
    data = await read_upload(file, settings.max_upload_bytes)
    if free_mb(settings.job_files_dir) - len(data) / 2**20 < settings.min_free_mb:
        raise _disk_full(settings)
    try:
        # Writing and fsyncing a large upload blocks: in a thread, so the event loop keeps answering.
        job = await asyncio.to_thread(store.create, data, params, file.filename, settings.max_queue)
    except QueueFull:
        raise _queue_full(settings) from None
    except OSError as err:
        if disk_full(err):
            raise _disk_full(settings) from None
        raise
    if worker is not None:
        worker.wake()
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return JobCreatedResponse(**status_of(job).model_dump(), status_url=f"/v1/jobs/{job.id}")


@router.get(
    "",
    response_model=JobListResponse,
    summary="List jobs, newest first",
    responses={422: {"model": ErrorResponse, "description": "bad limit or state, or `after` names no job"}},
)
def list_jobs(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=100, description="jobs per page")] = 20,
    after: Annotated[
        str | None, Query(description="the `last_id` of the page before: list the jobs older than it")
    ] = None,
    state: Annotated[
        list[JobState] | None, Query(description="only jobs in this state (repeat for several)")
    ] = None,
) -> JobListResponse:
    """A page of the jobs this server holds (finished ones until the retention policy deletes them), newest
    first: `?limit=20`, then `?after=<last_id>` while `has_more`; `?state=queued&state=running` filters."""
    try:
        page, more = store.list_jobs(limit, after, state or ())
    except UnknownCursor:
        why = (
            f"no job {after!r} (deleted since?)" if _ID_SHAPE.match(after or "") else "ids are 32 hex digits"
        )
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"after: {why}; list again without after"
        ) from None
    return JobListResponse(
        data=[status_of(job) for job in page],
        has_more=more,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
    )


@router.get(
    "/{job_id}",
    response_model=JobStatusResponse,
    summary="A job's state and progress per stage",
    responses=_NOT_FOUND,
)
def get_job(job_id: str, store: StoreDep) -> JobStatusResponse:
    return status_of(_job_or_404(store, job_id))


@router.get(
    "/{job_id}/result",
    summary="The result of a finished job",
    response_model=PredictResponse,
    responses={
        200: {"content": {"video/mp4": {}, "application/zip": {}}, "description": "json, mp4 or zip"},
        **_NOT_FOUND,
        409: {"model": ErrorResponse, "description": "the job has not succeeded (yet)"},
        422: {"model": ErrorResponse, "description": "unknown format"},
    },
)
def get_result(
    job_id: str,
    store: StoreDep,
    format: Annotated[OutputFormat | None, Query(description="default: the job's output parameter")] = None,
) -> Response:
    job = _job_or_404(store, job_id)
    if job.state is not JobState.succeeded:
        why = f": {job.error}" if job.error else ""
        raise HTTPException(status.HTTP_409_CONFLICT, f"job is {job.state.value}{why}")
    fmt = format or job.params.output
    name, media = {
        OutputFormat.json: (RESULT_JSON, "application/json"),
        OutputFormat.mp4: (RESULT_MP4, "video/mp4"),
        OutputFormat.zip: (RESULT_ZIP, "application/zip"),
    }[fmt]
    try:
        # Read at once (results are small): a job deleted meanwhile is a 404, never a half-sent file.
        content = store.result_path(job.id, name).read_bytes()
    except FileNotFoundError:
        if store.get(job.id) is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job.id!r}") from None
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job has no {fmt.value} result (nothing was rendered)"
        ) from None
    headers = {}
    if fmt is not OutputFormat.json:
        headers["Content-Disposition"] = f'attachment; filename="semworld-{job.id[:8]}.{fmt.value}"'
    return Response(content, media_type=media, headers=headers)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a job (a running one is canceled first)",
    responses={
        202: {
            "model": JobStatusResponse,
            "description": "the job is running: it stops within one batch or denoising step and ends "
            "canceled (`cancel_requested`); DELETE it again then to remove it",
        },
        204: {"description": "deleted: the job's row, input and results are gone (then a 404)"},
        **_NOT_FOUND,
    },
)
def delete_job(job_id: str, store: StoreDep) -> Response:
    """A queued or finished (succeeded, failed, canceled) job is deleted with its files at once: 204, and a
    404 afterwards. A running job is asked to stop: 202 with its status; it ends `canceled`."""
    _job_or_404(store, job_id)
    if store.delete(job_id):
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    changed = store.cancel(job_id)  # running (or it vanished meanwhile)
    if changed is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
    if changed.state is not JobState.running:  # it finished meanwhile: delete it now
        store.delete(job_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return JSONResponse(status_of(changed).model_dump(), status_code=status.HTTP_202_ACCEPTED)

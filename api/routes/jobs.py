"""/v1/jobs: submit a clip, follow its progress per stage, fetch the result, or cancel it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, HTTPException, Query, Response, UploadFile, status
from fastapi.responses import FileResponse

from api.deps import SettingsDep, StoreDep, WorkerDep, require_api_key
from api.jobs import FINISHED, RESULT_JSON, RESULT_MP4, RESULT_ZIP, Job, JobParams, JobState
from api.schemas import ErrorResponse, JobCreatedResponse, JobStatusResponse, OutputFormat, PredictResponse
from api.uploads import ERROR_RESPONSES, check_params, predict_params, read_upload

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], dependencies=[Depends(require_api_key)])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse, "description": "no such job"}}


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
    )


def _job_or_404(store: StoreDep, job_id: str) -> Job:
    job = store.get(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id!r}")
    return job


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
    if store.counts().get(JobState.queued, 0) >= settings.max_queue:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"the queue is full ({settings.max_queue} jobs); retry later",
            {"Retry-After": str(settings.retry_after_s)},
        )
    data = await read_upload(file, settings.max_upload_bytes)
    job = store.create(data, params, filename=file.filename)
    if worker is not None:
        worker.wake()
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return JobCreatedResponse(**status_of(job).model_dump(), status_url=f"/v1/jobs/{job.id}")


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
    path = store.result_path(job.id, name)
    if not path.is_file():
        raise HTTPException(status.HTTP_409_CONFLICT, f"job has no {fmt.value} result (nothing was rendered)")
    filename = None if fmt is OutputFormat.json else f"semworld-{job.id[:8]}.{fmt.value}"
    return FileResponse(path, media_type=media, filename=filename)


@router.delete(
    "/{job_id}",
    response_model=JobStatusResponse,
    summary="Cancel a job",
    responses={**_NOT_FOUND, 409: {"model": ErrorResponse, "description": "the job has already finished"}},
)
def cancel_job(job_id: str, store: StoreDep) -> JobStatusResponse:
    """A queued job is canceled at once; a running one stops at its next batch (`cancel_requested`)."""
    job = _job_or_404(store, job_id)
    if job.state in FINISHED:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job already {job.state.value}")
    canceled = store.cancel(job_id)
    assert canceled is not None
    return status_of(canceled)

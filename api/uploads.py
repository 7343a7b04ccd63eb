"""Reading a clip upload and its form parameters, shared by /v1/predict and /v1/jobs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Form, HTTPException, UploadFile, status

from api.jobs import JobParams
from api.schemas import ErrorResponse, OutputFormat
from api.settings import Settings

# Declared types a clip may come with; browsers and curl send application/octet-stream or nothing when unsure.
VIDEO_TYPES = ("video/", "application/octet-stream", "application/mp4", "application/x-matroska")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        401: "missing or wrong API key",
        413: "upload larger than the configured limit",
        415: "the file part is not declared as a video",
        422: "corrupt, empty or non-video file, or bad parameters",
        429: "too busy: retry after the number of seconds in Retry-After",
        503: "models not loaded yet",
    }.items()
}


def predict_params(
    horizon: Annotated[int, Form(ge=1, description="states to predict", examples=[8])] = 8,
    stride: Annotated[int | None, Form(ge=1, description="take every K-th frame (default 1)")] = None,
    state_rate: Annotated[
        float | None, Form(gt=0, description="or: take frames this many times a second")
    ] = None,
    seed: Annotated[int | None, Form(description="renderer seed", examples=[0])] = 0,
    steps: Annotated[int | None, Form(ge=1, le=1000, description="denoising steps")] = None,
    guidance: Annotated[float | None, Form(ge=0, le=50, description="guidance scale")] = None,
    output: Annotated[OutputFormat, Form(description="json, mp4 or zip")] = OutputFormat.json,
) -> JobParams:
    if stride is not None and state_rate is not None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "give either stride or state_rate, not both"
        )
    return JobParams(horizon, stride, state_rate, seed, steps, guidance, output)


def check_horizon(horizon: int, settings: Settings) -> None:
    """The service's own limit, checked before any upload is read or job queued (the pipeline, made with the
    same max_horizon, checks every parameter again when it runs)."""
    if horizon > settings.max_horizon:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"horizon: at most {settings.max_horizon}, got {horizon}"
        )


async def read_upload(file: UploadFile, limit: int) -> bytes:
    """The uploaded clip's bytes: 415 if declared as something other than a video, 413 past `limit`,
    422 if empty. Whether it decodes is checked by the pipeline (422 too)."""
    ctype = (file.content_type or "").split(";")[0].strip().lower()
    if ctype and not ctype.startswith(VIDEO_TYPES):
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"file: expected a video, got content type {ctype!r}"
        )
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE, f"file: larger than the limit of {limit / 2**20:.3g} MB"
        )
    if not data:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "file: the file is empty")
    return data

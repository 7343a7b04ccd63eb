"""Reading a clip upload and its form parameters, shared by /v1/predict and /v1/jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Form, HTTPException, UploadFile, status

from api.jobs import JobParams
from api.schemas import ErrorResponse, OutputFormat
from api.settings import Settings
from pipeline.world_model import check_call

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
    horizon: Annotated[int, Form(description="states to predict", examples=[8])] = 8,
    stride: Annotated[int | None, Form(description="take every K-th frame (default 1)")] = None,
    state_rate: Annotated[
        float | None, Form(description="or: take frames this many times a second")
    ] = None,
    seed: Annotated[int | None, Form(description="renderer seed", examples=[0])] = 0,
    steps: Annotated[int | None, Form(description="denoising steps (1..1000)")] = None,
    guidance: Annotated[float | None, Form(description="guidance scale (0..50)")] = None,
    output: Annotated[OutputFormat, Form(description="json, mp4 or zip")] = OutputFormat.json,
) -> JobParams:
    """The form fields as they came; their values are checked by `check_params` (the pipeline's own check)."""
    return JobParams(horizon, stride, state_rate, seed, steps, guidance, output)


def check_params(settings: Settings, states: Sequence[str] | None = None, **params: Any) -> None:
    """The world model's one parameter check (`check_call`) with the service's limits, as a 422 before any work
    is done or a job is queued; `params` are the pipeline's keyword arguments (horizon, stride, ...)."""
    params.pop("seed", None)
    try:
        check_call(None if states is not None else b"", states, **params, max_horizon=settings.max_horizon,
                   max_frames=settings.max_frames)  # fmt: skip
    except ValueError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(err)) from None


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

"""Reading a clip upload and its form parameters, shared by /v1/predict and /v1/jobs; the cost bound of
synchronous requests. Every numeric parameter has a finite range, published in the OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

from fastapi import Form, HTTPException, Request, UploadFile, status

from api.jobs import JobParams
from api.schemas import ErrorResponse, OutputFormat
from api.settings import Settings
from pipeline.params import ForecastParams
from pipeline.world_model import WorldModelPipeline, check_call

# Declared types a clip may come with; browsers and curl send application/octet-stream or nothing when unsure.
VIDEO_TYPES = ("video/", "application/octet-stream", "application/mp4", "application/x-matroska")

# Still images (by their first bytes) are refused: a clip needs frames over time.
IMAGE_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "PNG",
    b"\xff\xd8\xff": "JPEG",
    b"GIF87a": "GIF",
    b"GIF89a": "GIF",
    b"BM": "BMP",
    b"II*\x00": "TIFF",
    b"MM\x00*": "TIFF",
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "the body could not be parsed (malformed multipart, or JSON nested too deeply)",
        401: "missing or wrong API key",
        413: "upload larger than the configured limit",
        415: "the file part is not declared as a video",
        422: "corrupt, empty, still-image or non-video file, bad parameters, or too much work for a "
        "synchronous request",
        429: "too busy: retry after the number of seconds in Retry-After",
        503: "models not loaded yet",
    }.items()
}

# The errors of a JSON endpoint that runs a model within the request's deadline (/v1/rollout, /v1/plan).
JSON_RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{k: v for k, v in ERROR_RESPONSES.items() if k not in (413, 415)},
    413: {"model": ErrorResponse, "description": "body larger than 1 MB"},
    504: {"model": ErrorResponse, "description": "past the request time limit (the model stops too)"},
}

FORM_FIELDS = ("horizon", "stride", "state_rate", "seed", "steps", "guidance", "output", "actions")


def _form(name: str, **more: Any) -> Any:
    """Form() for the ForecastParams field `name`: its limits and description come from the one model of the call
    parameters (pipeline.params), so the form declares none of its own."""
    field = ForecastParams.model_fields[name]
    limits = {
        key: getattr(rule, key)
        for rule in field.metadata
        for key in ("gt", "ge", "lt", "le", "allow_inf_nan")
        if getattr(rule, key, None) is not None
    }
    return Form(description=field.description, **limits, **more)


async def predict_params(
    request: Request,
    horizon: Annotated[int, _form("horizon", examples=[8])] = 8,
    stride: Annotated[int | None, _form("stride")] = None,
    state_rate: Annotated[float | None, _form("state_rate")] = None,
    seed: Annotated[int, _form("seed", examples=[0])] = 0,
    steps: Annotated[int | None, _form("steps")] = None,
    guidance: Annotated[float | None, _form("guidance")] = None,
    output: Annotated[OutputFormat, Form(description="json, mp4 or zip")] = OutputFormat.json,
    actions: Annotated[
        str | None,
        Form(
            max_length=4096,
            description="a predictor with actions (docs/atari.md): action words separated by spaces or commas, "
            "the action after each observed state ('?': unknown), then one per forecast step",
            examples=["up up ? down"],
        ),
    ] = None,
) -> JobParams:
    """The form fields of a clip request. A field left out takes its default; a field sent empty is a 422
    (FastAPI would otherwise treat it as left out, silently)."""
    form = await request.form()  # already parsed for the fields above: this reads the cached form
    for name in FORM_FIELDS:
        values = form.getlist(name)
        if len(values) > 1:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{name}: given {len(values)} times")
        if values and isinstance(values[0], str) and not values[0].strip():
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT, f"{name}: empty; leave the field out for its default"
            )
    # (one of stride and state_rate: checked with the other call parameters, in check_params)
    return JobParams(horizon, stride, state_rate, seed, steps, guidance, output, parse_actions(actions))


def parse_actions(text: str | None) -> list[str | None] | None:
    """The `actions` form field as a list: words separated by spaces or commas, '?' for an unknown one."""
    if text is None:
        return None
    return [None if w == "?" else w for w in text.replace(",", " ").split()]


def check_params(settings: Settings, states: Sequence[str] | None = None, **params: Any) -> None:
    """The world model's one parameter check (`check_call`) with the service's limits, as a 422 before any work
    is done or a job is queued; `params` are the pipeline's keyword arguments (horizon, stride, ...). (The
    schema's ranges are the published ceilings; this applies the service's own settings, which may be lower.)"""
    params.pop("seed", None)
    params.pop("actions", None)  # the pipeline checks them (check_actions), once it is known to be loaded
    with refused():
        check_call(None if states is not None else b"", states, **params, max_horizon=settings.max_horizon,
                   max_frames=settings.max_frames)  # fmt: skip


@contextmanager
def refused() -> Iterator[None]:
    """A ValueError raised inside (a parameter out of range, words the models cannot read, an action they cannot
    take, a stage the weights lack) becomes a 422 with its message; meant for the checks a route makes before
    any work is queued."""
    try:
        yield
    except ValueError as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(err)) from None


def check_sync_cost(frames: int, steps: int | None, pipeline: WorldModelPipeline, settings: Settings) -> None:
    """Refuse a synchronous request whose rendering (frames x denoising steps) is past `max_sync_cost`, before
    any work: the deadline stops a run, but a request that cannot finish in time should not start."""
    per_frame = steps if steps is not None else pipeline.renderer.default_steps
    cost = frames * per_frame
    if cost > settings.max_sync_cost:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"too much work for a synchronous request: {frames} frames x {per_frame} denoising steps = {cost}, "
            f"the limit is {settings.max_sync_cost}; ask for fewer frames or steps, or submit the clip to "
            "/v1/jobs",
        )


async def read_upload(file: UploadFile, limit: int) -> bytes:
    """The uploaded clip's bytes: 415 if declared as something other than a video, 413 past `limit`,
    422 if empty or a still image. Whether it decodes is checked by the pipeline (422 too)."""
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
    kind = next((k for magic, k in IMAGE_MAGIC.items() if data.startswith(magic)), None)
    if kind is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind = "WebP"
    if kind is not None:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"file: a {kind} still image, not a video; send a clip (single images are not supported)",
        )
    return data

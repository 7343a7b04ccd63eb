"""POST /v1/predict: a clip in, predicted states and frames out, in one request (for small clips)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, File, HTTPException, Response, UploadFile, status

from api.deps import EngineDep, PipelineDep, SettingsDep, keyed_router
from api.engine import Busy, user_error_detail
from api.jobs import JobParams
from api.schemas import ErrorResponse, OutputFormat, PredictResponse, predict_payload
from api.uploads import (
    ERROR_RESPONSES,
    check_params,
    check_sync_cost,
    predict_params,
    read_upload,
    refused,
)
from pipeline.interfaces import ProgressCallback
from pipeline.outputs import zip_outputs
from pipeline.utils import UserError
from pipeline.world_model import WorldModelOutput

router = keyed_router("/v1", "predict")


def output_response(output: WorldModelOutput, fmt: OutputFormat) -> Response | dict:
    if fmt is OutputFormat.mp4:
        if output.video is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "nothing rendered, so no video")
        return Response(output.video, media_type="video/mp4")
    if fmt is OutputFormat.zip:
        return Response(
            zip_outputs(output),
            media_type="application/zip",
            headers={"Content-Disposition": 'attachment; filename="semworld.zip"'},
        )
    return predict_payload(output)


async def run_model(engine: EngineDep, settings: SettingsDep, work, entry: str):  # type: ignore[no-untyped-def]
    """Run `work(callback)` off the event loop; map the ways it can fail to 4xx/5xx answers."""
    try:
        return await engine.run_sync(work, settings.request_timeout_s, entry)
    except Busy:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            "too many requests in progress; retry later or use /v1/jobs",
            {"Retry-After": str(settings.retry_after_s)},
        ) from None
    except TimeoutError as err:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, f"{err}; use /v1/jobs for long clips") from None
    except (UserError, ValueError) as err:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, user_error_detail(err)) from None


@router.post(
    "/predict",
    response_model=PredictResponse,
    summary="Predict the frames after a clip (synchronous)",
    responses={
        200: {
            "description": "JSON (default), or the predicted frames as MP4, or a zip of every output",
            "content": {"video/mp4": {}, "application/zip": {}},
        },
        **ERROR_RESPONSES,
        504: {"model": ErrorResponse, "description": "past the request time limit (the model stops too)"},
    },
)
async def predict(
    file: Annotated[UploadFile, File(description="the clip (MP4, WebM, AVI, ...)")],
    params: Annotated[JobParams, Depends(predict_params)],
    pipeline: PipelineDep,
    engine: EngineDep,
    settings: SettingsDep,
) -> Response | dict:
    """Caption the clip into states, predict `horizon` more and render them. For clips within
    `SEMWORLD_MAX_SYNC_UPLOAD_MB`; longer work belongs in `/v1/jobs`."""
    check_params(settings, **params.pipeline_kwargs())
    check_sync_cost(params.horizon, params.steps, pipeline, settings)
    with refused():
        pipeline.check_actions(params.actions)
    data = await read_upload(file, settings.max_sync_upload_bytes)

    def work(callback: ProgressCallback) -> WorldModelOutput:
        encode = params.output is not OutputFormat.json
        return pipeline(data, **params.pipeline_kwargs(), encode_video=encode, callback=callback)

    output: WorldModelOutput = await run_model(engine, settings, work, "predict")
    engine.metrics.observe_timings(output.timings)
    return output_response(output, params.output)

"""GET /v1/samples: built-in sample clips for the web page (the weights' domain's own clips, made at startup, and any in the folder)."""

from __future__ import annotations

import re

from fastapi import HTTPException, Request, status
from fastapi.responses import FileResponse

from api.deps import keyed_router
from api.schemas import ErrorResponse, SampleInfo

router = keyed_router("/v1/samples", "samples")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(mp4|webm|mkv|avi|mov)$")


@router.get("", response_model=list[SampleInfo], summary="List the built-in sample clips")
def list_samples(request: Request) -> list[SampleInfo]:
    folder = request.app.state.samples_dir
    if folder is None or not folder.is_dir():
        return []
    return [
        SampleInfo(name=p.name, url=f"/v1/samples/{p.name}", size=p.stat().st_size)
        for p in sorted(folder.iterdir())
        if p.is_file() and _NAME.match(p.name)
    ]


@router.get(
    "/{name}",
    summary="Download a sample clip",
    response_class=FileResponse,
    responses={200: {"content": {"video/mp4": {}}}, 404: {"model": ErrorResponse}},
)
def get_sample(name: str, request: Request) -> FileResponse:
    folder = request.app.state.samples_dir
    if folder is None or not _NAME.match(name) or not (folder / name).is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sample {name!r}")
    return FileResponse(folder / name, media_type="video/mp4")

"""GET /health (the process answers) and GET /ready (models loaded and warmed, the job store reachable): no API
key needed."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from api.jobs import JobStore, free_mb, short_reason
from api.schemas import HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthResponse, summary="Liveness")
@router.head("/health", operation_id="health_head", summary="Liveness, headers only")
def health() -> HealthResponse:
    return HealthResponse(status="ok")


@router.head(
    "/ready",
    operation_id="ready_head",
    summary="Readiness, headers only",
    responses={
        503: {
            "description": "still loading, loading failed, the job store unreachable, or the data disk full"
        }
    },
)
@router.get(
    "/ready",
    response_model=ReadyResponse,
    summary="Readiness: models loaded and warmed, the job store reachable",
    responses={
        503: {
            "model": ReadyResponse,
            "description": "still loading, loading failed, the job store unreachable, or the data disk full",
        }
    },
)
def ready(request: Request) -> JSONResponse:
    engine = getattr(request.app.state, "engine", None)
    store: JobStore | None = getattr(request.app.state, "store", None)
    if store is not None:
        try:
            store.ping()
        except SQLAlchemyError as err:  # jobs can be neither queued nor run: not ready
            detail = f"job store unavailable: {short_reason(err)}"
            return JSONResponse(ReadyResponse(ready=False, detail=detail).model_dump(), status_code=503)
    settings = request.app.state.settings
    free = free_mb(settings.job_files_dir)
    if free < settings.min_free_mb:  # jobs could neither be stored nor give results
        detail = f"data disk full: {free:.1f} MB free, below min_free_mb ({settings.min_free_mb:g})"
        return JSONResponse(ReadyResponse(ready=False, detail=detail).model_dump(), status_code=503)
    if engine is not None and engine.ready:
        body = ReadyResponse(ready=True, warmup_seconds=engine.warmup_seconds)
        return JSONResponse(body.model_dump())
    detail = getattr(request.app.state, "load_error", None) or "loading models"
    return JSONResponse(ReadyResponse(ready=False, detail=detail).model_dump(), status_code=503)

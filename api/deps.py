"""FastAPI dependencies: settings, the pipeline, the engine, the job store, and the API key check (with the
router every keyed resource is declared on)."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Request, status

from api.engine import Engine
from api.jobs import JobStore, JobWorker
from api.schemas import ErrorResponse
from api.settings import Settings
from pipeline.world_model import WorldModelPipeline


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_engine(request: Request) -> Engine:
    engine: Engine | None = getattr(request.app.state, "engine", None)
    if engine is None or not engine.ready:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, "models are not loaded yet; see /ready", {"Retry-After": "5"}
        )
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]


def get_pipeline(engine: EngineDep) -> WorldModelPipeline:
    """The loaded pipeline (made in the app's lifespan, for synchronous routes and jobs alike)."""
    return engine.pipeline


PipelineDep = Annotated[WorldModelPipeline, Depends(get_pipeline)]


def get_store(request: Request) -> JobStore:
    store: JobStore | None = getattr(request.app.state, "store", None)
    if store is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the job store is not open yet")
    return store


StoreDep = Annotated[JobStore, Depends(get_store)]


def get_worker(request: Request) -> JobWorker | None:
    return getattr(request.app.state, "worker", None)


WorkerDep = Annotated[JobWorker | None, Depends(get_worker)]


def require_api_key(
    settings: SettingsDep,
    x_api_key: Annotated[str | None, Header(description="the API key, if the server requires one")] = None,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> None:
    """When `SEMWORLD_API_KEY` is set, accept it as `X-API-Key: KEY` or `Authorization: Bearer KEY`."""
    if settings.api_key is None:
        return
    given = x_api_key
    if given is None and authorization and authorization.lower().startswith("bearer "):
        given = authorization[7:].strip()
    expected = settings.api_key.get_secret_value().encode()
    # compare_digest takes the same time wherever the strings differ.
    if given is None or not hmac.compare_digest(given.encode(), expected):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "missing or wrong API key", {"WWW-Authenticate": "Bearer"}
        )


KEY_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "missing or wrong API key (when the server has one)"},
}


def keyed_router(
    prefix: str, tag: str, responses: dict[int | str, dict[str, Any]] | None = None
) -> APIRouter:
    """The router of one resource: every route under `prefix` needs the API key (when the server has one) and
    documents its 401 and `responses` (the errors all its routes share); `tag` groups the routes in the docs."""
    return APIRouter(
        prefix=prefix,
        tags=[tag],
        dependencies=[Depends(require_api_key)],
        responses={**KEY_RESPONSES, **(responses or {})},
    )

"""FastAPI dependencies: settings, the pipeline, the engine, the job store, and the API key check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, status

from api.engine import Engine
from api.jobs import JobStore, JobWorker
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

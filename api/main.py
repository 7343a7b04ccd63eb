"""The FastAPI app: one process owns the models (loaded once in the lifespan), routers per resource, short JSON
errors, the API key checked from the headers before any body is read, upload limits, job retention, Prometheus
metrics, an OpenAPI schema that says what the server does, and the static web page. Run with `semworld serve`
(loopback and trusted networks; elsewhere behind the reverse proxy of docker/nginx.conf).
"""

from __future__ import annotations

import asyncio
import hmac
import importlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import Depends, FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_fastapi_instrumentator import Instrumentator
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from api.deps import require_api_key
from api.engine import Engine
from api.jobs import JobStore, JobWorker, short_reason, store_unavailable
from api.metrics import Metrics, merge_expositions
from api.routes import docs, health, jobs, model, pages, plan, predict, rollout, samples
from api.routes.pages import STATIC_DIR
from api.schemas import ErrorResponse, predict_payload
from api.settings import Settings
from pipeline.placement import set_threads
from pipeline.utils import UserError
from pipeline.video import VideoLimits, write_samples
from pipeline.world_model import WorldModelPipeline

logger = logging.getLogger("api")

DESCRIPTION = """\
semworld reads a clip as short sentences (semantic states), forecasts the next states with a 4-tensor
attention predictor, and draws them with a diffusion renderer.

* `POST /v1/predict`: a clip in, predicted states and frames out (synchronous, small clips).
* `POST /v1/jobs`: the same as a job; follow `GET /v1/jobs/{id}`, fetch `GET /v1/jobs/{id}/result`;
  `GET /v1/jobs` lists the jobs, newest first.
* `POST /v1/rollout`: states in words in (edit any of them), the future out.
* `POST /v1/plan`: states and a goal in words in, the actions that lead there out.

Errors are JSON `{"detail": "..."}`. If the server has an API key, send it as `X-API-Key` or a Bearer token.
"""


def _load_pipeline(app: FastAPI, settings: Settings) -> WorldModelPipeline:
    """The service's pipeline, made with the service's limits and batch sizes whatever stages it runs."""
    logger.info("torch CPU threads: %d", set_threads(settings.threads))
    options: dict[str, Any] = {
        "limits": VideoLimits(
            max_frames=settings.max_frames, max_side=settings.max_side, max_duration_s=settings.max_duration_s
        ),
        "caption_batch_size": settings.caption_batch_size,
        "render_batch_size": settings.render_batch_size,
        "max_horizon": settings.max_horizon,
    }
    stages = app.state.stages
    if stages is None and not settings.pipeline_factory:
        return WorldModelPipeline.from_pretrained(
            settings.weights_dir,
            device=settings.device,
            dtype=settings.dtype,
            stage_devices=settings.stage_devices,
            stage_dtypes=settings.stage_dtypes,
            compile=settings.compile,
            project=settings.project,
            mirror=settings.mirror,
            **options,
        )
    if stages is None:
        module, _, func = (settings.pipeline_factory or "").partition(":")
        stages = getattr(importlib.import_module(module), func or "make_pipeline")()
    # what the stages speak and read at goes with them (their domain, state rate and confidence threshold)
    spoken = {"domain": stages.domain, "default_state_rate": stages.default_state_rate,
              "confidence_threshold": stages.confidence_threshold}  # fmt: skip
    return WorldModelPipeline(stages.captioner, stages.predictor, stages.renderer, **options, **spoken)


def _prepare_samples(app: FastAPI, settings: Settings, pipe: WorldModelPipeline) -> None:
    """The page's sample clips: the samples folder's, else the domain's own (none for a domain without any)."""
    folder = settings.samples_dir or settings.data_dir / "samples"
    app.state.samples_dir = folder
    if settings.samples_dir is None and not any(folder.glob("*.mp4")):
        try:
            write_samples(folder, pipe.domain)
        except Exception as err:  # samples are a convenience of the page; never a reason not to serve
            logger.warning("no %s samples: %s", pipe.domain.name, err)


async def _start(app: FastAPI, settings: Settings, metrics: Metrics, store: JobStore) -> None:
    """Load and warm the models in a thread (the server already answers /health), then start the job worker."""
    try:
        pipe = await asyncio.to_thread(_load_pipeline, app, settings)
        engine = Engine(pipe, metrics, settings.max_sync_waiting)
        if settings.warmup:
            await asyncio.to_thread(engine.warmup)
        await asyncio.to_thread(_prepare_samples, app, settings, pipe)
    except Exception as err:
        # One line for /ready and the log; the traceback only at debug level.
        app.state.load_error = f"failed to load models: {err}"
        logger.error("%s", app.state.load_error)
        logger.debug("model loading failed", exc_info=True)
        return
    app.state.engine = engine
    engine.ready = True
    worker = JobWorker(
        store,
        engine,
        job_timeout_s=settings.job_timeout_s,
        result_payload=lambda out, params: predict_payload(out),
        retention=(settings.job_retention_s, settings.job_retention_bytes),
        sweep_s=settings.retention_sweep_s,
        lease_s=settings.job_lease_s,
        heartbeat_s=settings.job_heartbeat_s,
        max_attempts=settings.job_max_attempts,
    )
    app.state.worker = worker
    worker.start()
    logger.info("ready")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    # `replicated`: one of several replicas behind a router (Ray Serve), which set it before the lifespan runs
    replicated = getattr(app.state, "replicated", False)
    store = await asyncio.to_thread(
        partial(JobStore, settings.data_dir, settings.database_url_value, jobs_dir=settings.job_files_dir)
    )
    if not store.is_postgres and not replicated:
        # The embedded store of one process: whatever is left running, that process died. (A shared store's
        # jobs, and those of Ray Serve replicas sharing a SQLite file, are recovered by their lease: other
        # replicas may be running them.)
        await asyncio.to_thread(store.recover, settings.job_max_attempts)
    app.state.store = store
    app.state.engine = None
    app.state.worker = None
    app.state.load_error = None
    app.state.samples_dir = settings.samples_dir
    start = asyncio.create_task(_start(app, settings, app.state.metrics, store))
    if replicated:
        # A replica takes traffic only once its models are loaded; one that cannot load them fails to start
        # (the router says so, and retries).
        await start
        if app.state.load_error:
            store.close()
            raise RuntimeError(app.state.load_error)
    try:
        yield
    finally:
        start.cancel()
        worker: JobWorker | None = app.state.worker
        if worker is not None:
            await asyncio.to_thread(worker.stop)
        if app.state.engine is not None:
            app.state.engine.ready = False
        store.close()


class ApiKeyGate:
    """When the server has an API key, answer 401 for protected paths (/v1/..., /metrics) from the request
    headers alone, before a single body byte is read: an unauthenticated upload is never received, parsed
    or spooled. Accepts `X-API-Key: KEY` or `Authorization: Bearer KEY`, compared in constant time. (The
    `require_api_key` dependency checks again and documents the header in the schema.)"""

    PROTECTED = ("/v1/", "/metrics")

    def __init__(self, app: Callable[..., Awaitable[None]], key: bytes) -> None:
        self.app = app
        self.key = key

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.PROTECTED):
            await self.app(scope, receive, send)
            return
        given = None
        for name, value in scope.get("headers") or []:
            if name == b"x-api-key":
                given = value
                break
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
        if given is None or not hmac.compare_digest(given, self.key):
            response = JSONResponse(
                {"detail": "missing or wrong API key"},
                status_code=status.HTTP_401_UNAUTHORIZED,
                headers={"WWW-Authenticate": "Bearer", "Connection": "close"},
            )
            await response(scope, receive, send)  # type: ignore[arg-type]
            return
        await self.app(scope, receive, send)


class UploadLimit:
    """Answer 413 before reading a body larger than the limit of its route (by Content-Length, and by counting
    for chunked uploads), so an oversize upload is never parsed or spooled to disk."""

    def __init__(self, app: Callable[..., Awaitable[None]], limits: Callable[[str], int]) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.limits(scope["path"])
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._reject(send, limit)
            return
        seen = 0
        exceeded = replaced = False

        async def counting_receive() -> dict[str, Any]:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    exceeded = True
                    raise _TooLarge()
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            # The body parser turns our exception into its own 400; answer 413 in its place.
            nonlocal replaced
            if not exceeded:
                await send(message)
            elif not replaced:
                replaced = True
                await self._reject(send, limit)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except _TooLarge:
            if not replaced:
                await self._reject(send, limit)

    @staticmethod
    async def _reject(send: Any, limit: int) -> None:
        response = JSONResponse(
            {"detail": f"request body larger than the limit of {limit / 2**20:.3g} MB"},
            status_code=status.HTTP_413_CONTENT_TOO_LARGE,
            headers={"Connection": "close"},
        )
        await response({"type": "http"}, None, send)  # type: ignore[arg-type]


class _TooLarge(Exception):
    pass


def _short(err: RequestValidationError) -> str:
    parts = []
    for e in err.errors()[:3]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path", "header"))
        parts.append(f"{loc}: {e.get('msg', 'invalid')}" if loc else str(e.get("msg", "invalid")))
    return "; ".join(parts) or "invalid request"


def _truthful_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """Make the generated OpenAPI schema say what the server does, so generated clients work:
    - every error body is `{"detail": str}` (ErrorResponse), 422 included (FastAPI documents its list form);
    - form fields cannot be null (a multipart value is text): leave one out to get its default;
    - stride and state_rate are alternatives: a form may not carry both; an uploaded file is not empty."""
    schemas = spec.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.setdefault("ErrorResponse", ErrorResponse.model_json_schema())

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("$ref") == "#/components/schemas/HTTPValidationError":
                node["$ref"] = "#/components/schemas/ErrorResponse"
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec.get("paths", {}))
    for name, schema in schemas.items():
        if not name.startswith("Body_"):
            continue
        for prop in schema.get("properties", {}).values():
            options = prop.get("anyOf")
            if options and {"type": "null"} in options:
                rest = [o for o in options if o != {"type": "null"}]
                del prop["anyOf"]
                if len(rest) == 1:
                    prop.update(rest[0])
                else:
                    prop["anyOf"] = rest
        if "file" in schema.get("properties", {}):
            schema["properties"]["file"]["minLength"] = 1  # an empty file is a 422
        if {"stride", "state_rate"} <= set(schema.get("properties", {})):
            schema["not"] = {"required": ["stride", "state_rate"]}
    return spec


def _schema_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI schema documents for a concrete request path (empty if none)."""
    table = getattr(app.state, "schema_methods", None)
    if table is None:
        table = []
        for template, ops in app.openapi().get("paths", {}).items():
            # "/v1/jobs/{job_id}" -> ^/v1/jobs/[^/]+$
            pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
            table.append((re.compile(f"^{pattern}$"), sorted(m.upper() for m in ops)))
        app.state.schema_methods = table
    return next((methods for pattern, methods in table if pattern.match(path)), [])


def create_app(settings: Settings | None = None, stages: WorldModelPipeline | None = None) -> FastAPI:
    """Build the app for `settings` (default: read from SEMWORLD_* variables). Models load in the lifespan from
    settings.weights_dir, or `stages` (any pipeline: its captioner, predictor and renderer are served with the
    service's limits and batch sizes) stand in for them."""
    settings = settings or Settings()
    app = FastAPI(
        title="semworld",
        version="0.1.0",
        summary="A video world model that thinks in words",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # /docs comes from api.routes.docs, its assets served here, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.stages = stages
    metrics = Metrics()
    app.state.metrics = metrics

    def job_counts() -> dict[str, int]:
        store: JobStore | None = getattr(app.state, "store", None)
        if store is None:
            return {}
        try:
            return store.counts()
        except SQLAlchemyError as err:  # the database is down: /metrics still answers, without job counts
            if not store_unavailable(err):
                raise
            return {}

    metrics.watch_jobs(
        job_counts, lambda: app.state.store.disk_bytes if getattr(app.state, "store", None) else 0
    )
    for router in (health.router, model.router, predict.router, rollout.router, plan.router, jobs.router,
                   samples.router, pages.router, docs.router):  # fmt: skip
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.mount(docs.ASSETS_URL, docs.assets(), name="docs-assets")
    _add_middleware(app, settings)
    _add_error_handlers(app)
    Instrumentator(registry=metrics.registry, excluded_handlers=["/metrics", "/static.*"]).instrument(app)
    app.state.gather_metrics = None  # Ray Serve: a coroutine giving every replica's exposition, by replica

    @app.get(
        "/metrics",
        tags=["health"],
        dependencies=[Depends(require_api_key)],
        response_class=PlainTextResponse,
        summary="Prometheus metrics (text exposition format)",
        responses={401: {"model": ErrorResponse, "description": "missing or wrong API key"}},
    )
    async def exposition() -> Response:
        gather = app.state.gather_metrics
        # off the event loop: the job gauges read the store, which may be slow to answer or unreachable
        if gather is not None:
            body = await asyncio.to_thread(merge_expositions, await gather())
        else:
            body = await asyncio.to_thread(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _truthful_schema(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    summary=app.summary,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Body-size limits per route, the API key (before the limit: 401 comes from headers alone), and CORS."""

    def body_limit(path: str) -> int:
        if path.startswith("/v1/predict"):
            return settings.max_sync_upload_bytes
        if path.startswith("/v1/jobs"):
            return settings.max_upload_bytes
        return 1 << 20  # JSON bodies (rollout)

    app.add_middleware(UploadLimit, limits=body_limit)  # type: ignore[arg-type]
    if settings.api_key is not None:
        app.add_middleware(ApiKeyGate, key=settings.api_key.get_secret_value().encode())  # type: ignore[arg-type]
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["*"], allow_headers=["*"]
        )


def _add_error_handlers(app: FastAPI) -> None:
    """Every error a client sees is `{"detail": str}`: a short 422 for bad input, the HTTP error's own message
    (with every allowed method on a 405), a 503 with Retry-After while the job store's database cannot be
    reached, and a bare 500 (the traceback only in the log)."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _short(err)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        headers = dict(err.headers or {})
        if err.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
            # Starlette names the methods of one route; a path served by several (GET and DELETE of a job,
            # GET and HEAD of /health) must list them all, as the schema does.
            allowed = _schema_methods(app, request.url.path)
            if allowed:
                headers["Allow"] = ", ".join(allowed)
        return JSONResponse({"detail": str(err.detail)}, status_code=err.status_code, headers=headers)

    @app.exception_handler(UserError)
    async def _user(request: Request, err: UserError) -> JSONResponse:
        # the caller's input, found past the routes' own checks (e.g. a stage the weights do not have)
        return JSONResponse({"detail": str(err)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(SQLAlchemyError)
    async def _store(request: Request, err: SQLAlchemyError) -> JSONResponse:
        # The job store's database cannot be reached (down, restarting): a short 503 until it is back.
        if not store_unavailable(err):
            return await _internal(request, err)
        logger.warning(
            "%s %s: job store unavailable: %s", request.method, request.url.path, short_reason(err)
        )
        retry = str(app.state.settings.retry_after_s)
        return JSONResponse(
            {"detail": "job store unavailable; retry later"},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": retry},
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, err: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal server error"}, status_code=500)


app = create_app()

"""The service on Ray Serve: the same FastAPI app (routes, limits, deadlines, auth, metrics, error bodies) as the
plain server, run as the ingress of one Ray Serve deployment whose replicas each own a whole pipeline.

Why one deployment, not one per stage: a request's stages run back to back on the same frames (decode, caption,
predict, render, encode); split into deployments, each hop would copy the frames between processes, and on one
GPU the stages would still take turns. A replica is one process with the models on its device, its own engine
lock, and its own job worker; replicas share the job store (a SQLite file on one machine, PostgreSQL across
machines: `SEMWORLD_DATABASE_URL`) and the data folder, so any replica answers for any job.

Start it with `semworld serve --ray` (a local Ray instance, or `SEMWORLD_RAY_ADDRESS` of a running cluster).
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api.settings import Settings
from pipeline.utils import UserError

logger = logging.getLogger(__name__)

APP_NAME = "semworld"


class RaySettings(BaseSettings):
    """How the service runs on Ray Serve. Environment variable = `SEMWORLD_RAY_` + the field name in capitals."""

    model_config = SettingsConfigDict(env_prefix="SEMWORLD_RAY_", env_file=".env", extra="ignore")

    address: str | None = Field(
        default=None,
        description="a running Ray cluster to join ('auto', 'ray://head:10001'); default: start a local instance",
    )
    replicas: int = Field(default=1, ge=1, description="replicas of the pipeline deployment (fixed count)")
    min_replicas: int | None = Field(
        default=None,
        ge=1,
        description="with max_replicas: autoscale between the two instead of `replicas` (at least 1: a replica "
        "runs the job worker)",
    )
    max_replicas: int | None = Field(default=None, ge=1, description="the autoscaler's ceiling")
    target_ongoing_requests: float = Field(
        default=2.0, gt=0, description="requests per replica the autoscaler aims at"
    )
    max_ongoing_requests: int = Field(
        default=8,
        ge=1,
        description="requests one replica holds at a time (Ray queues the rest at its proxy); past the app's "
        "own max_sync_waiting a replica answers 429",
    )
    num_cpus: float = Field(default=1.0, ge=0, description="CPUs Ray reserves per replica")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs Ray reserves per replica (1 on a GPU box)")
    local_cpus: int | None = Field(
        default=None, ge=1, description="CPUs of the local Ray instance (default: the machine's)"
    )
    dashboard: bool = Field(default=False, description="start Ray's dashboard with the local instance")

    @model_validator(mode="after")
    def _check_bounds(self) -> RaySettings:
        if self.max_replicas is None:
            if self.min_replicas is not None:
                raise ValueError(
                    "min_replicas needs max_replicas (autoscaling); for a fixed count set replicas"
                )
            return self
        if "replicas" in self.model_fields_set:
            raise ValueError("replicas (a fixed count) and max_replicas (autoscaling) exclude each other")
        if (self.min_replicas or 1) > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})"
            )
        return self

    def deployment_options(self) -> dict[str, Any]:
        """The keyword arguments of `serve.deployment` these settings give."""
        options: dict[str, Any] = {
            "name": APP_NAME,
            "max_ongoing_requests": self.max_ongoing_requests,
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "health_check_timeout_s": 30,
            # past the job worker's own stop (30 s): an interrupted job is put back in the queue before Ray kills
            "graceful_shutdown_timeout_s": 45,
        }
        if self.max_replicas is not None:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas if self.min_replicas is not None else 1,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
            }
        else:
            options["num_replicas"] = self.replicas
        return options


def logging_config(level: str) -> dict[str, Any]:
    """Ray Serve's logging for a `--log-level`: its level, and the per-request access log only at info or below
    (as uvicorn logs requests at info)."""
    name = {"critical": "CRITICAL", "error": "ERROR", "warning": "WARNING", "info": "INFO"}.get(
        level, "DEBUG"
    )
    return {"log_level": name, "enable_access_log": name in ("INFO", "DEBUG")}


def build(settings: Settings, ray_settings: RaySettings, log_level: str = "info") -> Any:
    """The Ray Serve application: `SemworldReplica` deployments built with `settings` (bound, not yet run)."""
    from ray import serve

    @serve.ingress()
    class SemworldReplica:
        """One replica: the service's FastAPI app, built inside the replica's process. /metrics on any replica
        answers for all of them (each sample labelled with its replica)."""

        def __init__(self, settings: Settings) -> None:
            self.settings = settings
            self.service: Any = None

        def __serve_build_asgi_app__(self) -> Any:
            from api.main import create_app

            self.service = create_app(self.settings)
            # one of several replicas: its startup waits for the models (Ray routes to it once startup returns),
            # and jobs left running are recovered by lease, never at its start
            self.service.state.replicated = True
            self.service.state.gather_metrics = gather_metrics
            return self.service

        def metrics_text(self) -> tuple[str, str]:
            """(this replica's id, its own metrics in the text exposition format)."""
            from prometheus_client import generate_latest

            replica = serve.get_replica_context().replica_id.unique_id
            return replica, generate_latest(self.service.state.metrics.registry).decode()

    async def gather_metrics() -> dict[str, str]:
        """Every live replica's metrics; a replica that is down or does not answer in 3 s is left out (and
        counted in `semworld_metrics_replicas_missing`), so a scrape never hangs on one."""
        handle = serve.get_deployment_handle(APP_NAME, app_name=APP_NAME)
        results = await handle.broadcast("metrics_text").results_async(timeout_s=3, return_exceptions=True)
        texts: dict[str, str] = dict(r for r in results if isinstance(r, tuple))
        missing = len(results) - len(texts)
        texts["all"] = (
            "# HELP semworld_metrics_replicas_missing Replicas that did not answer this scrape\n"
            "# TYPE semworld_metrics_replicas_missing gauge\n"
            f"semworld_metrics_replicas_missing {missing}\n"
        )
        return texts

    # folders as the starting process means them: a replica's working directory is Ray's, not the caller's
    folders = ("weights_dir", "data_dir", "jobs_dir", "samples_dir")
    settings = settings.model_copy(
        update={f: getattr(settings, f).resolve() for f in folders if getattr(settings, f) is not None}
    )
    options = ray_settings.deployment_options() | {"logging_config": logging_config(log_level)}
    deployment = serve.deployment(**options)(SemworldReplica)
    return deployment.bind(settings)


def _deploy(app: Any, **options: Any) -> None:
    """serve.run; a deployment that cannot start (e.g. its replicas fail to load the models) ends in one line."""
    from ray import serve

    try:
        serve.run(app, **options)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"semworld did not start on Ray Serve ({first}); Ray's log above says why") from None


def run(settings: Settings, ray_settings: RaySettings, host: str, port: int, log_level: str = "info") -> None:
    """Start (or join) Ray, deploy the service on host:port, and block until interrupted; then shut Serve down."""
    import ray
    from ray import serve

    if ray_settings.address is None:
        ray.init(
            num_cpus=ray_settings.local_cpus,
            include_dashboard=ray_settings.dashboard,
            logging_level=logging.WARNING,
        )
    else:
        ray.init(address=ray_settings.address, logging_level=logging.WARNING)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # serve.run's wait ends; Serve and the local Ray instance shut down

    signal.signal(signal.SIGTERM, stop)  # after ray.init, which installs a handler of its own
    serve.start(http_options={"host": host, "port": port}, logging_config=logging_config(log_level))
    try:
        _deploy(
            build(settings, ray_settings, log_level),
            name=APP_NAME,
            route_prefix="/",
            blocking=True,
            logging_config=logging_config(log_level),
        )
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
        ray.shutdown()

"""Service settings, read once from `SEMWORLD_*` environment variables (or a `.env` file) by pydantic-settings."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.params import HORIZON_MAX
from pipeline.utils import REPO_ROOT

# Hard ceilings, published in the OpenAPI schema: the call parameters' own are in pipeline.params; this one is the
# service's. The settings below may lower them, never raise them.
STATES_LIMIT = 64  # states given to /v1/rollout, and observed states sampled from a clip


class Settings(BaseSettings):
    """Every knob of the service. Environment variable = `SEMWORLD_` + the field name in capitals."""

    model_config = SettingsConfigDict(env_prefix="SEMWORLD_", env_file=".env", extra="ignore")

    weights_dir: Path = Field(
        default=REPO_ROOT / "weights", description="weights folder with model_index.json"
    )
    device: str | None = Field(
        default=None, description="torch device; default cuda when available, else cpu"
    )
    dtype: str | None = Field(
        default=None, description="float32, float16 or bfloat16; default per stage and device"
    )
    stage_devices: dict[str, str] = Field(
        default_factory=dict,
        description='per-stage devices that override `device`, as JSON: {"captioner": "cpu"}',
    )
    stage_dtypes: dict[str, str] = Field(
        default_factory=dict,
        description='per-stage dtypes that override `dtype`, as JSON: {"predictor": "float32"}',
    )
    threads: int | None = Field(
        default=None,
        ge=1,
        description="torch CPU threads; default one fewer than the usable cores (torch's one per core stalls "
        "when anything else runs on the machine)",
    )
    compile: bool = Field(
        default=False,
        description="torch.compile the predictor's rollout step (CUDA graphs on a GPU; eager if it cannot compile)",
    )
    pipeline_factory: str | None = Field(
        default=None,
        description="'module:function' returning a WorldModelPipeline, instead of loading weights_dir",
    )
    warmup: bool = Field(default=True, description="run every stage once at startup before /ready says yes")
    project: bool = Field(
        default=True,
        description="project predicted states onto the valid states of the domain model_index.json names "
        "(a domain with a grammar)",
    )
    mirror: bool = Field(
        default=False,
        description="forecast from the mean of each history and its left-right mirror (a domain with a "
        "mirror; "
        "about 2.7x the predictor's time)",
    )

    data_dir: Path = Field(
        default=Path("data/api"),
        description="jobs database (SQLite, without database_url), uploads and results; with database_url, a "
        "folder every replica mounts (the jobs' files live here whichever replica runs them)",
    )
    jobs_dir: Path | None = Field(
        default=None,
        description="the jobs' uploads and results (default data_dir/jobs): a disk of their own, or a folder "
        "every replica mounts",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="the job store in a database server shared by replicas, e.g. "
        "postgresql+psycopg://user@/semworld?host=/run/postgresql (the `postgres` extra); default: SQLite in "
        "data_dir",
    )
    samples_dir: Path | None = Field(default=None, description="built-in sample clips for the web page")

    max_upload_mb: float = Field(default=64.0, gt=0, description="largest upload to /v1/jobs (413 above)")
    max_sync_upload_mb: float = Field(
        default=8.0, gt=0, description="largest upload to /v1/predict (413 above)"
    )
    max_frames: int = Field(
        default=STATES_LIMIT, ge=1, le=STATES_LIMIT, description="most observed states a clip may give"
    )
    max_side: int = Field(default=4096, ge=16, description="largest video side in pixels")
    max_duration_s: float = Field(default=120.0, gt=0, description="longest clip in seconds")
    max_horizon: int = Field(
        default=HORIZON_MAX, ge=1, le=HORIZON_MAX, description="most states to predict per request"
    )
    caption_batch_size: int = Field(default=16, ge=1)
    render_batch_size: int = Field(default=8, ge=1)

    request_timeout_s: float = Field(
        default=60.0, gt=0, description="time limit of a synchronous request (504 past it)"
    )
    max_sync_cost: int = Field(
        default=1024,
        ge=1,
        description="most denoising steps x frames one synchronous request may ask for (422 above: use /v1/jobs)",
    )
    max_sync_waiting: int = Field(
        default=4, ge=1, description="synchronous requests running or waiting (429 above)"
    )
    max_queue: int = Field(default=32, ge=1, description="queued jobs (429 above)")
    job_timeout_s: float = Field(default=600.0, gt=0, description="time limit of one job run")
    job_max_attempts: int = Field(
        default=2, ge=1, description="runs of a job interrupted by a crash before it fails"
    )
    job_retention_s: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="finished, failed and canceled jobs older than this are deleted, files and all",
    )
    job_retention_mb: float = Field(
        default=10240.0,
        gt=0,
        description="past this many MB of job files, the oldest finished jobs are deleted first",
    )
    job_lease_s: float = Field(
        default=30.0,
        gt=0,
        description="a running job whose heartbeat is older than this (its replica died) is queued again, or "
        "failed after job_max_attempts runs",
    )
    job_heartbeat_s: float = Field(
        default=5.0, gt=0, description="seconds between heartbeats of a running job (below job_lease_s)"
    )
    min_free_mb: float = Field(
        default=64.0, ge=0, description="free MB on the jobs' disk below which /ready says no, new jobs 503"
    )
    retention_sweep_s: float = Field(default=60.0, gt=0, description="seconds between retention sweeps")
    retry_after_s: int = Field(
        default=5,
        ge=1,
        description="Retry-After seconds sent with 429, and with 503 while the job store is down",
    )

    api_key: SecretStr | None = Field(
        default=None, description="if set, required as X-API-Key or Bearer token"
    )
    cors_origins: list[str] = Field(default_factory=list)

    @field_validator("dtype")
    @classmethod
    def _check_dtype(cls, v: str | None) -> str | None:
        if v is not None and v not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, got {v!r}")
        return v

    @field_validator("stage_devices", "stage_dtypes")
    @classmethod
    def _check_stages(cls, v: dict[str, str]) -> dict[str, str]:
        from pipeline.placement import parse_stage_options

        return parse_stage_options(v, "stage option")  # an unknown stage name: one line

    @field_validator("stage_dtypes")
    @classmethod
    def _check_stage_dtypes(cls, v: dict[str, str]) -> dict[str, str]:
        from pipeline.placement import parse_dtype

        for stage, name in v.items():
            parse_dtype(name, f"stage_dtypes {stage}=")
        return v

    @model_validator(mode="after")
    def _check_lease(self) -> Settings:
        if 3 * self.job_heartbeat_s > self.job_lease_s:
            raise ValueError(
                f"job_lease_s ({self.job_lease_s:g}) must be at least 3 x job_heartbeat_s ({self.job_heartbeat_s:g}): "
                "a lease that one late heartbeat can miss reruns live jobs"
            )
        url = self.database_url_value
        if url and not url.startswith(("postgresql:", "postgresql+")):
            raise ValueError("database_url must name a PostgreSQL database (postgresql+psycopg://...); "
                             "without it jobs stay in the embedded SQLite file")  # fmt: skip
        return self

    @field_validator("api_key", "database_url", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v: object) -> object:
        # `SEMWORLD_API_KEY=` (as docker-compose passes an unset variable) means none, not the empty string.
        return None if isinstance(v, str) and not v.strip() else v

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def job_retention_bytes(self) -> int:
        return int(self.job_retention_mb * 1024 * 1024)

    @property
    def max_sync_upload_bytes(self) -> int:
        return int(self.max_sync_upload_mb * 1024 * 1024)

    @property
    def database_url_value(self) -> str | None:
        """The job store's database URL in clear (None: the embedded SQLite file)."""
        return self.database_url.get_secret_value() if self.database_url is not None else None

    @property
    def job_files_dir(self) -> Path:
        """Where the jobs' uploads and results live."""
        return self.jobs_dir if self.jobs_dir is not None else self.data_dir / "jobs"


@lru_cache
def get_settings() -> Settings:
    return Settings()

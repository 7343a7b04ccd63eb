"""Fixtures for API tests: an app on stand-in stages (`create_app(settings, stages=...)`), and a helper to wait."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.jobs import JobStore
from api.main import create_app
from api.settings import Settings
from tests.fakes import make_pipeline
from tests.pg import Cluster, start_cluster

REPO = Path(__file__).resolve().parents[2]
ASSETS = Path(__file__).resolve().parents[1] / "assets"
REAL_CLIP = ASSETS / "bigbuckbunny_160x90.mp4"


def wait_ready(client: TestClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get("/ready")
        if r.status_code == 200:
            return
        assert r.status_code == 503
        if r.json()["detail"].startswith("failed"):
            raise AssertionError(r.json()["detail"])
        time.sleep(0.05)
    raise AssertionError("app not ready in time")


def wait_state(client: TestClient, job_id: str, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(f"/v1/jobs/{job_id}").json()["state"] == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} never {state}")


def wait_job(client: TestClient, job_id: str, timeout: float = 30.0, headers=None) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
        if job["state"] in ("succeeded", "failed", "canceled"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


@pytest.fixture(scope="session")
def world_clip(tmp_path_factory) -> Path:
    """A clip of the built-in world (skipped when the world package cannot make one)."""
    from pipeline.domain import get_domain
    from pipeline.video import write_samples

    folder = tmp_path_factory.mktemp("world-samples")
    try:
        return write_samples(folder, get_domain("shapes"))[0]  # world-bounce.mp4
    except ImportError as err:
        pytest.skip(f"world package not available: {err}")


# ---- the job store's database: embedded SQLite by default, a throwaway PostgreSQL where a test asks -----------
@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster on a unix socket for the whole session (skipped where there is no PostgreSQL)."""
    cluster = start_cluster()
    yield cluster
    if cluster.running():
        cluster.stop("immediate")
    shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's cluster (dropped after the test)."""
    if not pg_cluster.running():  # a test stopped it and failed before starting it again
        pg_cluster.start()
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    if not pg_cluster.running():
        pg_cluster.start()
    pg_cluster.drop_database(name)


def database_for(request: pytest.FixtureRequest) -> str | None:
    """None (SQLite in data_dir) for the "sqlite" parameter, a fresh PostgreSQL database for "postgres"."""
    if getattr(request, "param", "sqlite") == "postgres":
        return request.getfixturevalue("pg_url")
    return None


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str | None:
    """The job store make_client and make_store use: SQLite unless parametrized (indirectly) with "postgres";
    a module overrides it with `params=STORES` to run all its tests on both."""
    return database_for(request)


STORES = ["sqlite", "postgres"]


@pytest.fixture
def make_store(tmp_path, database_url) -> Iterator[Callable[..., JobStore]]:
    """make_store(data_dir=None, owner=None) -> a JobStore on the test's database (closed after the test)."""
    stores: list[JobStore] = []

    def make(data_dir: Path | None = None, owner: str | None = None) -> JobStore:
        store = JobStore(data_dir or tmp_path / "data", database_url, owner=owner)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def make_client(tmp_path, database_url) -> Iterator[Callable[..., TestClient]]:
    """make_client(pipeline=None, **settings) -> a started TestClient whose app is ready (its job store: the
    `database_url` fixture's, unless given)."""
    clients: list[TestClient] = []

    def make(pipeline=None, data_dir: Path | None = None, **overrides) -> TestClient:
        if database_url is not None:
            overrides.setdefault("database_url", database_url)
        settings = Settings(data_dir=data_dir or tmp_path / "data", samples_dir=ASSETS, **overrides)
        app = create_app(settings, stages=pipeline or make_pipeline(0.0))
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        wait_ready(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


# ---- the real server: `semworld serve` in a subprocess -------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.data_dir: Path | None = None
        self.database_url: str | None = None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def launch(folder: Path, data_dir: Path | None = None, weights: Path | None = None, args: Sequence[str] = (),
           **env: str) -> Server:  # fmt: skip
    """`semworld serve ARGS` in a subprocess on a free loopback port, its log in `folder`; returns once /ready
    says yes. The stages are tests/fakes.py's unless `weights` is given."""
    port = free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SEMWORLD_DATA_DIR": str(data_dir or folder / "data"),
        "SEMWORLD_SAMPLES_DIR": str(ASSETS),
        "SEMWORLD_MAX_SYNC_UPLOAD_MB": "0.1",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    if weights is None:
        full_env.setdefault("SEMWORLD_PIPELINE_FACTORY", "tests.fakes:make_pipeline")
    else:
        full_env["SEMWORLD_WEIGHTS_DIR"] = str(weights)
    log = folder / f"server-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", *args],
        cwd=REPO, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    server.data_dir = Path(full_env["SEMWORLD_DATA_DIR"])
    server.database_url = full_env.get("SEMWORLD_DATABASE_URL") or None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {log.read_text()[-2000:]}")
        try:
            r = httpx.get(f"{server.url}/ready", timeout=2)
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        if r.status_code == 200:
            return server
        if r.status_code == 503 and r.headers.get("content-type") == "application/json":
            assert not r.json()["detail"].startswith("failed"), r.json()["detail"]
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"server not ready: {log.read_text()[-2000:]}")


@pytest.fixture
def start_server(tmp_path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(data_dir: Path | None = None, weights: Path | None = None, args: Sequence[str] = (),
              **env: str) -> Server:  # fmt: skip
        server = launch(tmp_path, data_dir, weights, args, **env)
        servers.append(server)
        return server

    yield start
    for s in servers:
        # a crash for the plain server; Ray's own processes go only with a graceful stop
        s.stop(signal.SIGTERM if "--ray" in s.proc.args else signal.SIGKILL)

"""The job store shared by replicas: schema migrations, exactly-once pickup across stores, leases (a run taken over
cannot clobber the new one, a killed replica's job runs again), and the service while PostgreSQL is down."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest
import sqlalchemy as sa

from api.engine import Engine
from api.jobs import FINISHED, JobParams, JobState, JobStore, JobWorker
from api.metrics import Metrics
from api.schemas import predict_payload
from pipeline.world_model import WorldModelPipeline
from tests.api.conftest import REAL_CLIP, REPO, STORES, wait_job, wait_ready, wait_state
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer, make_pipeline

on_both_stores = pytest.mark.parametrize("database_url", STORES, indirect=True)


# The schema the store created before it had migrations (a file of that version has no alembic_version table).
UNVERSIONED_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    params TEXT NOT NULL,
    progress TEXT NOT NULL,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    filename TEXT,
    warnings TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created_at);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at, id);
"""


def test_an_unversioned_sqlite_store_is_stamped_and_upgraded_keeping_its_jobs(tmp_path):
    db = sqlite3.connect(tmp_path / "jobs.sqlite3")
    db.executescript(UNVERSIONED_SCHEMA)
    db.executescript(
        "INSERT INTO jobs VALUES ('done', 'succeeded', 1.0, 2.0, '{}', '{}', NULL, 1, 0, 'a.mp4', '[\"w\"]');"
        "INSERT INTO jobs VALUES ('next', 'queued', 3.0, 3.0, '{\"horizon\": 2}', '{}', NULL, 0, 0, NULL, NULL);"
    )
    db.commit()
    db.close()
    store = JobStore(tmp_path)
    assert store.get("done").warnings == ["w"] and store.get("done").state is JobState.succeeded
    claimed = store.claim_next()
    assert claimed.id == "next" and claimed.params.horizon == 2 and claimed.owner == store.owner
    store.close()
    with sqlite3.connect(tmp_path / "jobs.sqlite3") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0002",)]
        columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
        indexes = {row[1] for row in db.execute("PRAGMA index_list(jobs)")}
    assert {"owner", "heartbeat_at", "warnings"} <= columns
    assert {"jobs_state", "jobs_created", "jobs_lease"} <= indexes
    again = JobStore(tmp_path)  # opening a current store changes nothing
    assert again.counts()["running"] == 1 and again.counts()["succeeded"] == 1


def test_replicas_opening_a_new_database_together_migrate_it_once(pg_url, tmp_path):
    barrier = threading.Barrier(4)
    stores: list[JobStore] = []
    errors: list[BaseException] = []

    def open_store(i: int) -> None:
        barrier.wait()
        try:
            stores.append(JobStore(tmp_path / "shared", pg_url))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=open_store, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 4
    with stores[0].engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [("0002",)]
    for store in stores:
        store.close()


@on_both_stores
def test_two_stores_claim_every_job_exactly_once(make_store):
    stores = [make_store(), make_store()]
    ids = {stores[0].create(b"clip", JobParams()).id for _ in range(60)}
    claimed: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def claim(store: JobStore) -> None:
        barrier.wait()
        while (job := store.claim_next()) is not None:
            with lock:
                claimed[job.id].append(store.owner)

    threads = [threading.Thread(target=claim, args=(stores[i % 2],)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(claimed) == ids and all(len(owners) == 1 for owners in claimed.values())
    for job_id, (owner,) in claimed.items():
        row = stores[1].get(job_id)
        assert row.state is JobState.running and row.attempts == 1 and row.owner == owner
    assert stores[0].counts()["queued"] == 0


@on_both_stores
def test_a_run_taken_over_cannot_clobber_the_new_run(make_store):
    first, second = make_store(), make_store()
    job = first.create(b"clip", JobParams())
    assert first.claim_next().id == job.id and first.heartbeat(job.id)
    assert second.recover(max_attempts=3, lease_s=60) == (0, 0)  # a live lease is left alone
    time.sleep(0.05)
    assert second.recover(max_attempts=3, lease_s=0.01) == (1, 0)  # an expired one goes back to the queue
    assert not first.heartbeat(job.id) and not first.set_progress(job.id, {"render": {"done": 9, "total": 9}})
    again = second.claim_next()
    assert again.id == job.id and again.attempts == 2 and again.owner == second.owner

    # the first run comes back late: none of its writes lands
    assert not first.write_result(job.id, {"result.json": b'{"run": "first"}'})
    assert not first.finish(job.id, JobState.failed, "late") and not first.requeue(job.id)
    assert not list(first.job_dir(job.id).glob("result*"))  # its partial folder is gone, nothing visible

    assert second.set_progress(job.id, {"render": {"done": 1, "total": 1}})
    assert second.write_result(job.id, {"result.json": b'{"run": "second"}'})
    assert second.finish(job.id, JobState.succeeded)
    done = first.get(job.id)
    assert done.state is JobState.succeeded and done.error is None and done.attempts == 2
    assert done.progress == {"render": {"done": 1, "total": 1}}
    assert first.result_path(job.id, "result.json").read_bytes() == b'{"run": "second"}'


def _worker(store: JobStore, lease_s: float) -> JobWorker:
    return JobWorker(
        store,
        Engine(make_pipeline(0.0), Metrics(), 1),
        job_timeout_s=60,
        result_payload=lambda output, _params: predict_payload(output),
        poll_s=0.05,
        lease_s=lease_s,
        heartbeat_s=0.2,
        max_attempts=3,
    )


def test_a_killed_replica_s_job_runs_again_after_its_lease_exactly_once(pg_url, tmp_path):
    """A replica (a real process) is killed -9 in the middle of a job; the surviving replica's worker takes the
    job over once its lease (1 s) expires and runs it to the end, once; nothing of the dead run is left."""
    data = tmp_path / "shared"  # the data_dir both replicas mount
    store = JobStore(data, pg_url)
    job = store.create(REAL_CLIP.read_bytes(), JobParams(horizon=3, stride=4))
    env = {**os.environ, "PYTHONPATH": str(REPO), "FAKE_RENDER_DELAY": "60", "OMP_NUM_THREADS": "1"}
    log = (tmp_path / "replica.log").open("w")
    replica = subprocess.Popen(
        [sys.executable, "-m", "tests.api.replica", str(data), pg_url],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        owner = replica.stdout.readline().strip()
        assert owner, (tmp_path / "replica.log").read_text()[-2000:]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # running there, captions done, held in its first render batch
            row = store.get(job.id)
            if row.state is JobState.running and row.progress["caption"]["done"] == 4:
                break
            time.sleep(0.05)
        assert row.owner == owner and row.progress["caption"]["done"] == 4, row
        # what a kill in the middle of writing the result leaves behind
        partial = store.job_dir(job.id) / f"result.partial-{owner}"
        partial.mkdir()
        (partial / "result.json").write_text('{"half": ')
    finally:
        replica.kill()
        replica.wait(10)
        log.close()
    killed = time.monotonic()
    assert store.get(job.id).state is JobState.running  # nobody has noticed yet

    worker = _worker(store, lease_s=1.0)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while store.get(job.id).state is JobState.running and time.monotonic() < deadline:
            time.sleep(0.05)
        rerun_at = time.monotonic()
        while store.get(job.id).state not in FINISHED and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert rerun_at - killed > 0.5  # the lease was waited out (the last heartbeat was at most 0.2 s old)
    done = store.get(job.id)
    assert done.state is JobState.succeeded and done.attempts == 2 and done.owner == store.owner
    assert store.counts() == {"queued": 0, "running": 0, "succeeded": 1, "failed": 0, "canceled": 0}
    assert len(json.loads(store.result_path(job.id, "result.json").read_text())["frames"]) == 3
    assert sorted(p.name for p in store.job_dir(job.id).iterdir()) == ["input", "result"]
    assert worker.engine.metrics.predictions.labels("job", "ok")._value.get() == 1  # finished once
    store.close()


def submit(client):
    return client.post(
        "/v1/jobs",
        files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
        data={"horizon": "3", "stride": "4"},
    )


def test_postgres_down_is_a_short_503_and_the_service_recovers_by_itself(make_client, pg_url, pg_cluster):
    gate = threading.Event()
    pipe = WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(gate=gate), render_batch_size=1
    )
    client = make_client(pipeline=pipe, warmup=False, database_url=pg_url, retry_after_s=3)
    held = submit(client).json()["id"]
    wait_state(client, held, "running")
    queued = submit(client).json()["id"]

    pg_cluster.stop("fast")
    try:
        gate.set()  # the held run ends while the database is down: its result waits to be recorded
        for method, path in [("GET", f"/v1/jobs/{held}"), ("GET", "/v1/jobs"), ("GET", f"/v1/jobs/{held}/result"),
                             ("DELETE", f"/v1/jobs/{queued}")]:  # fmt: skip
            r = client.request(method, path)
            assert r.status_code == 503 and r.json() == {"detail": "job store unavailable; retry later"}, path
            assert r.headers["retry-after"] == "3"
        r = submit(client)
        assert r.status_code == 503 and r.json()["detail"].startswith("job store unavailable")
        r = client.get("/ready")
        assert r.status_code == 503 and r.json()["ready"] is False
        assert r.json()["detail"].startswith("job store unavailable: ") and len(r.json()["detail"]) < 250
        assert client.get("/health").status_code == 200
        assert client.get("/metrics").status_code == 200  # without job counts, but it answers
    finally:
        pg_cluster.start()

    wait_ready(client)
    for job_id in (held, queued):
        done = wait_job(client, job_id)
        assert done["state"] == "succeeded" and done["attempts"] == 1, done
        assert len(client.get(f"/v1/jobs/{job_id}/result").json()["frames"]) == 3
    listed = {j["id"] for j in client.get("/v1/jobs").json()["data"]}
    assert listed == {held, queued}  # nothing lost, nothing from the refused upload
    store = client.app.state.store
    assert {p.name for p in store.jobs_dir.iterdir()} == {held, queued}
    later = submit(client).json()["id"]
    assert wait_job(client, later)["state"] == "succeeded"


def test_a_query_bug_on_sqlite_is_not_an_unavailable_store(tmp_path):
    import sqlite3

    from sqlalchemy import exc

    from api.jobs import store_unavailable

    def err(message: str) -> exc.OperationalError:
        return exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError(message))

    assert store_unavailable(err("database is locked")) and store_unavailable(
        err("unable to open database file")
    )
    assert not store_unavailable(
        err("no such column: nope")
    )  # a bug: a 500 in the log, not a 503 "retry later"


def test_settings_refuse_a_lease_one_late_beat_can_miss_and_a_database_that_is_not_postgresql(tmp_path):
    import pydantic
    import pytest

    from api.settings import Settings

    with pytest.raises(pydantic.ValidationError, match="at least 3 x job_heartbeat_s"):
        Settings(job_lease_s=5.1, job_heartbeat_s=5)
    with pytest.raises(pydantic.ValidationError, match="must name a PostgreSQL database"):
        Settings(database_url="sqlite:///jobs.db")
    assert Settings(database_url="postgresql+psycopg://u@/db?host=/tmp").database_url is not None

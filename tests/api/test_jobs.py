"""Jobs: submit, progress, result formats, cancel, a full queue, and restarts (graceful and crashed); each on
the embedded SQLite store and on PostgreSQL."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile

import pytest

from api.jobs import JobParams, JobState, JobStore
from pipeline.world_model import WorldModelPipeline
from tests.api.conftest import REAL_CLIP, STORES, database_for, wait_job, wait_state
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer, UnsureCaptioner


@pytest.fixture(params=STORES)
def database_url(request):
    return database_for(request)


def submit(client, data=None, **form):
    form.setdefault("horizon", "3")
    form.setdefault("stride", "4")
    return client.post(
        "/v1/jobs",
        files={"file": ("c.mp4", REAL_CLIP.read_bytes() if data is None else data, "video/mp4")},
        data=form,
    )


def test_job_runs_and_serves_every_format(make_client):
    client = make_client()
    r = submit(client, output="mp4")
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["state"] == "queued" and r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert set(job["progress"]) == {"decode", "caption", "predict", "render", "encode"}
    done = wait_job(client, job["id"])
    assert done["state"] == "succeeded" and done["attempts"] == 1
    assert done["progress"]["caption"] == {"done": 4, "total": 4} and done["progress"]["render"]["done"] == 3
    assert done["result_url"] == f"/v1/jobs/{job['id']}/result"
    r = client.get(done["result_url"])  # default: the job's own output parameter
    assert r.headers["content-type"] == "video/mp4" and r.content[4:8] == b"ftyp"
    body = client.get(done["result_url"], params={"format": "json"}).json()
    assert len(body["observed_states"]) == 4 and len(body["frames"]) == 3
    z = zipfile.ZipFile(io.BytesIO(client.get(done["result_url"], params={"format": "zip"}).content))
    assert json.loads(z.read("states.json"))["predicted_states"] == body["predicted_states"]


def test_bad_clip_fails_the_job_with_a_message(make_client):
    client = make_client()
    job = submit(client, data=b"\x00not a video" * 100).json()
    done = wait_job(client, job["id"])
    assert done["state"] == "failed" and done["error"] == "file: not a readable video"
    r = client.get(f"/v1/jobs/{job['id']}/result")
    assert r.status_code == 409 and r.json()["detail"] == "job is failed: file: not a readable video"


def test_unknown_job_and_bad_params(make_client):
    client = make_client()
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.delete("/v1/jobs/nope").json()["detail"] == "no job 'nope'"
    assert submit(client, horizon="0").status_code == 422
    assert submit(client, data=b"").json()["detail"] == "file: the file is empty"
    r = client.post("/v1/jobs", files={"file": ("a.txt", b"hi", "text/plain")})
    assert r.status_code == 415


def pages(client, limit, **query):
    """Every page of GET /v1/jobs, following last_id while has_more."""
    out, after = [], None
    while True:
        r = client.get("/v1/jobs", params={"limit": limit, **query, **({"after": after} if after else {})})
        assert r.status_code == 200, r.text
        out.append(r.json())
        if not r.json()["has_more"]:
            return out
        after = r.json()["last_id"]


def test_list_jobs_newest_first_in_pages_filtered_by_state(make_client):
    client = make_client()
    ids = [submit(client).json()["id"] for _ in range(4)]
    bad = submit(client, data=b"\x00not a video" * 100).json()["id"]
    for job_id in [*ids, bad]:
        wait_job(client, job_id)
    newest_first = [bad, *reversed(ids)]

    body = client.get("/v1/jobs").json()  # GET /v1/jobs answered 405 before it listed
    assert [j["id"] for j in body["data"]] == newest_first and body["has_more"] is False
    assert body["first_id"] == bad and body["last_id"] == ids[0]
    assert body["data"][1] == client.get(f"/v1/jobs/{ids[-1]}").json()  # each entry is the job's status

    got = pages(client, 2)
    assert [len(p["data"]) for p in got] == [2, 2, 1] and [p["has_more"] for p in got] == [True, True, False]
    assert [j["id"] for p in got for j in p["data"]] == newest_first

    assert [j["id"] for j in client.get("/v1/jobs", params={"state": "failed"}).json()["data"]] == [bad]
    succeeded = [j["id"] for p in pages(client, 3, state="succeeded") for j in p["data"]]
    assert succeeded == list(reversed(ids))
    both = client.get("/v1/jobs", params=[("state", "succeeded"), ("state", "failed")]).json()["data"]
    assert len(both) == 5
    assert client.get("/v1/jobs", params={"state": "queued"}).json() == {
        "data": [], "has_more": False, "first_id": None, "last_id": None,
    }  # fmt: skip

    assert client.delete(f"/v1/jobs/{ids[1]}").status_code == 204
    assert [j["id"] for j in client.get("/v1/jobs", params={"after": ids[2]}).json()["data"]] == [ids[0]]


def test_list_jobs_bad_queries_are_one_line_422s(make_client):
    client = make_client()
    gone = submit(client).json()["id"]
    wait_job(client, gone)
    assert client.delete(f"/v1/jobs/{gone}").status_code == 204
    for query, detail in [
        ({"limit": "0"}, "limit: Input should be greater than or equal to 1"),
        ({"limit": "101"}, "limit: Input should be less than or equal to 100"),
        (
            {"state": "done"},
            "state.0: Input should be 'queued', 'running', 'succeeded', 'failed' or 'canceled'",
        ),
        ({"after": gone}, f"after: no job '{gone}' (deleted since?); list again without after"),
        ({"after": "../etc"}, "after: ids are 32 hex digits; list again without after"),
    ]:
        r = client.get("/v1/jobs", params=query)
        assert r.status_code == 422 and r.json() == {"detail": detail}, (query, r.text)


def test_list_jobs_needs_the_api_key(make_client):
    client = make_client(api_key="s3cret")
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer s3cret"}).json()["data"] == []


def test_pages_cover_jobs_created_at_the_same_instant_once_each(make_store):
    store = make_store()
    ids = {store.create(b"clip", JobParams()).id for _ in range(7)}
    with store._db() as db:
        db.execute("UPDATE jobs SET created_at = 1000.0")  # a tie: the id orders them
    seen, after, more = [], None, True
    while more:
        page, more = store.list_jobs(2, after)
        seen += [j.id for j in page]
        after = page[-1].id
    assert seen == sorted(ids, reverse=True)


def test_cancel_queued_and_running_jobs(make_client):
    gate = threading.Event()
    renderer = NoiseRenderer(gate=gate)
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), renderer, render_batch_size=1)
    client = make_client(pipeline=pipe, warmup=False)
    running = submit(client).json()["id"]
    queued = submit(client).json()["id"]
    wait_state(client, running, "running")
    deadline = time.monotonic() + 30
    while renderer.calls == 0 and time.monotonic() < deadline:  # held inside its first render batch
        time.sleep(0.02)
    r = client.delete(f"/v1/jobs/{queued}")  # a queued job is deleted at once
    assert r.status_code == 204 and client.get(f"/v1/jobs/{queued}").status_code == 404
    assert not (client.app.state.store.job_dir(queued)).exists()
    r = client.delete(f"/v1/jobs/{running}")  # a running one is asked to stop
    assert r.status_code == 202
    assert r.json()["state"] == "running" and r.json()["cancel_requested"] is True
    # The worker asks the database at most every 50 ms (api/jobs/worker.py); the noise renderer's other batches
    # take microseconds, so let that window pass before releasing the first one, or the job may finish unasked.
    time.sleep(0.1)
    gate.set()
    assert wait_job(client, running)["state"] == "canceled"
    assert renderer.calls == 1  # stopped after its first batch
    assert client.get(f"/v1/jobs/{running}/result").status_code == 409
    # A finished (here canceled) job: DELETE removes it, files and all.
    assert client.delete(f"/v1/jobs/{running}").status_code == 204
    assert client.get(f"/v1/jobs/{running}").status_code == 404


def test_full_queue_is_429_with_retry_after(make_client):
    gate = threading.Event()
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(gate=gate))
    client = make_client(pipeline=pipe, warmup=False, max_queue=2, retry_after_s=7)
    ids = [submit(client).json()["id"]]
    wait_state(client, ids[0], "running")
    ids += [submit(client).json()["id"] for _ in range(2)]
    r = submit(client)
    assert r.status_code == 429 and r.headers["retry-after"] == "7" and "queue is full" in r.json()["detail"]
    metrics = client.get("/metrics").text
    assert "semworld_queue_depth 2.0" in metrics and 'semworld_jobs{state="running"} 1.0' in metrics
    gate.set()
    assert all(wait_job(client, i)["state"] == "succeeded" for i in ids)


def test_graceful_restart_requeues_the_running_job(make_client, make_store, tmp_path):
    """Shut down while one job runs and one is queued; a new app on the same data runs both to the end."""
    gate = threading.Event()
    slow = WorldModelPipeline(
        BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(gate=gate), render_batch_size=1
    )
    data = tmp_path / "jobs-data"
    first = make_client(pipeline=slow, data_dir=data, warmup=False)
    a = submit(first).json()["id"]
    b = submit(first).json()["id"]
    wait_state(first, a, "running")
    worker = first.app.state.worker

    def release_after_stop() -> None:  # let the held batch return once the shutdown has begun
        deadline = time.monotonic() + 30
        while not worker._stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()

    threading.Thread(target=release_after_stop, daemon=True).start()
    first.__exit__(None, None, None)
    store = make_store(data)
    assert store.get(a).state is JobState.queued and store.get(b).state is JobState.queued
    assert not (data / "jobs" / a / "result").exists()

    second = make_client(data_dir=data)
    for job_id in (a, b):
        done = wait_job(second, job_id)
        assert done["state"] == "succeeded" and done["attempts"] == 1
        assert len(second.get(f"/v1/jobs/{job_id}/result").json()["frames"]) == 3


def test_crash_recovery_retries_then_fails(tmp_path, make_client, make_store):
    """Rows left `running` by a crash (with a half-written result) are rerun, or failed after max attempts: at
    startup with SQLite, once their lease expires with PostgreSQL."""
    data = tmp_path / "crashed"
    store = make_store(data)
    params = JobParams(horizon=2, stride=8)
    retry = store.create(REAL_CLIP.read_bytes(), params)
    spent = store.create(REAL_CLIP.read_bytes(), params)
    queued = store.create(REAL_CLIP.read_bytes(), params)
    for job in (retry, spent):
        assert store.claim_next().id == job.id  # running, attempt 1
    (data / "jobs" / retry.id / "result.partial").mkdir()
    (data / "jobs" / retry.id / "result.partial" / "result.json").write_text('{"half": ')
    with store._db() as db:
        db.execute("UPDATE jobs SET attempts = 2 WHERE id = ?", (spent.id,))

    client = make_client(data_dir=data, job_max_attempts=2, job_lease_s=1.0, job_heartbeat_s=0.2)
    done = wait_job(client, retry.id)
    assert done["state"] == "succeeded" and done["attempts"] == 2
    assert len(client.get(done["result_url"]).json()["predicted_states"]) == 2
    assert not (data / "jobs" / retry.id / "result.partial").exists()
    failed = client.get(f"/v1/jobs/{spent.id}").json()
    assert failed["state"] == "failed" and "interrupted 2 times" in failed["error"]
    assert wait_job(client, queued.id)["state"] == "succeeded"


def test_a_finished_job_says_its_warning(make_client):
    """GET /v1/jobs/{id} carries the call's warning, where a client polling for the result sees it."""
    pipe = WorldModelPipeline(UnsureCaptioner(), EchoPredictor(), NoiseRenderer(), domain="shapes",
                              confidence_threshold=-0.01)  # fmt: skip
    client = make_client(pipeline=pipe)
    r = client.post("/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
                    data={"horizon": "1", "stride": "8"})  # fmt: skip
    assert r.status_code == 202, r.text
    assert r.json()["warnings"] == []  # queued: nothing to say yet
    job = wait_job(client, r.json()["id"])
    assert job["state"] == "succeeded" and len(job["warnings"]) == 1
    assert job["warnings"][0].startswith("2 of 2 states read from this clip are unsure")
    assert client.get("/v1/jobs").json()["data"][0]["warnings"] == job["warnings"]  # the list says it too


def test_a_store_from_before_warnings_opens_and_keeps_its_jobs(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "jobs.sqlite3")
    db.executescript(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, state TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL "
        "NOT NULL, params TEXT NOT NULL, progress TEXT NOT NULL, error TEXT, attempts INTEGER NOT NULL DEFAULT 0, "
        "cancel_requested INTEGER NOT NULL DEFAULT 0, filename TEXT);"
        "INSERT INTO jobs VALUES ('old', 'succeeded', 1.0, 2.0, '{}', '{}', NULL, 1, 0, 'a.mp4');"
    )
    db.commit()
    db.close()
    store = JobStore(tmp_path)
    old = store.get("old")
    assert old is not None and old.state is JobState.succeeded and old.warnings == []
    store.finish("old", JobState.succeeded, warnings=["w"])
    assert store.get("old").warnings == ["w"]

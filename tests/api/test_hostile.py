"""The service's known failure modes under hostile load, one test each: deadlines that stop the model, bounded work, the API key before the
body, atomic queue admission, job retention and deletion, file work off the event loop, and the small ones."""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
import time

import pytest
from PIL import Image

from api.jobs import JobParams, JobState, JobStore, QueueFull
from api.main import create_app
from api.settings import Settings
from pipeline.world_model import WorldModelPipeline
from tests.api.conftest import ASSETS, REAL_CLIP, STORES, wait_job, wait_state
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer

STEP = 0.05  # seconds per denoising step of the stand-in renderer below


def stepped_pipeline(**kw) -> tuple[WorldModelPipeline, NoiseRenderer]:
    renderer = NoiseRenderer(step_delay=STEP, **kw)
    return WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), renderer, render_batch_size=8), renderer


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample in a Prometheus text page."""
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def settle(renderer: NoiseRenderer, quiet: float = 4 * STEP, timeout: float = 30.0) -> None:
    """Wait until the renderer has stopped taking steps."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline and renderer.steps_run != seen:
        seen = renderer.steps_run
        time.sleep(quiet)


# ---- 1. a synchronous deadline stops the model within one denoising step --------------------------------------
@pytest.mark.parametrize(
    "request_kind",
    [
        # two slow requests: 64 context frames drawn after the prediction, and 300 steps x 8 frames
        (
            "rollout",
            {"states": [f"s{i}." for i in range(64)], "horizon": 1, "steps": 40, "render_context": 64},
        ),
        ("predict", {"horizon": "8", "steps": "300", "stride": "8"}),
    ],
    ids=["rollout-context", "predict-steps"],
)
def test_deadline_stops_the_model_within_one_step(make_client, request_kind):
    kind, body = request_kind
    pipe, renderer = stepped_pipeline()
    client = make_client(pipeline=pipe, warmup=False, request_timeout_s=0.6, max_sync_cost=10**6)
    t0 = time.monotonic()
    if kind == "rollout":
        r = client.post("/v1/rollout", json=body)
    else:
        r = client.post(
            "/v1/predict", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}, data=body
        )
    answered = time.monotonic() - t0
    assert r.status_code == 504 and "longer than 0.6 s" in r.json()["detail"], r.text
    assert answered < 0.6 + 0.5
    settle(renderer)
    # The model stopped at its first step end past the deadline. Seen from here (t0 is before the upload is
    # parsed, so a little early): within a step plus noise; the server's own measure below is exact.
    assert renderer.last_step_end - (t0 + 0.6) < STEP + 0.4
    metrics = client.get("/metrics").text
    overrun = metric(metrics, "semworld_deadline_overrun_max_seconds")
    assert 0 < overrun < STEP + 0.15
    assert 0 < metric(metrics, "semworld_deadline_overrun_max_steps") < 1.5  # the step in progress, then out
    # ... and the model is free for the next request at once.
    assert client.post("/v1/rollout", json={"states": ["a."], "horizon": 1, "steps": 1}).status_code == 200


def test_a_job_is_canceled_within_one_step(make_client):
    pipe, renderer = stepped_pipeline()
    client = make_client(pipeline=pipe, warmup=False)
    r = client.post(
        "/v1/jobs",
        files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
        data={"horizon": "8", "stride": "8", "steps": "300"},
    )
    job_id = r.json()["id"]
    while renderer.steps_run < 3:
        time.sleep(0.01)
    asked = time.monotonic()
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 202
    assert wait_job(client, job_id)["state"] == "canceled"
    assert renderer.last_step_end - asked < STEP + 0.15


@pytest.mark.parametrize(
    ("path", "kwargs"),
    [
        ("/v1/predict", {"data": {"horizon": "8", "steps": "1000"}}),
        ("/v1/rollout", {"json": {"states": ["a."] * 64, "horizon": 1, "steps": 40, "render_context": 64}}),
    ],
)
def test_synchronous_work_is_bounded_and_sent_to_jobs(make_client, path, kwargs):
    client = make_client()  # default max_sync_cost 1024 (steps x frames)
    if path == "/v1/predict":
        kwargs["files"] = {"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}
    r = client.post(path, **kwargs)
    assert r.status_code == 422
    assert (
        "too much work for a synchronous request" in r.json()["detail"] and "/v1/jobs" in r.json()["detail"]
    )
    # The same work as a job is accepted.
    r = client.post(
        "/v1/jobs",
        files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
        data={"horizon": "8", "steps": "1000", "stride": "8"},
    )
    assert r.status_code == 202


# ---- 3. the API key before any body byte -----------------------------------------------------------------------
def test_unauthenticated_upload_is_refused_before_the_body_is_read(tmp_path):
    app = create_app(
        Settings(data_dir=tmp_path, samples_dir=ASSETS, api_key="k3y"), stages=stepped_pipeline()[0]
    )
    received: list[bytes] = []
    sent: list[dict] = []

    async def receive() -> dict:
        received.append(b"chunk")
        return {"type": "http.request", "body": b"x" * 65536, "more_body": True}

    async def send(message: dict) -> None:
        sent.append(message)

    async def call(headers: list[tuple[bytes, bytes]]) -> None:
        scope = {
            "type": "http", "method": "POST", "path": "/v1/jobs", "raw_path": b"/v1/jobs", "query_string": b"",
            "headers": [(b"content-type", b"multipart/form-data; boundary=b"),
                        (b"content-length", str(20 * 2**20).encode()), *headers],
            "http_version": "1.1", "scheme": "http", "server": ("t", 80), "client": ("c", 1), "root_path": "",
            "app": app,
        }  # fmt: skip
        await app(scope, receive, send)

    for headers in ([], [(b"x-api-key", b"wrong")], [(b"authorization", b"Bearer nope")]):
        received.clear()
        sent.clear()
        asyncio.run(call(headers))
        assert sent[0]["status"] == 401 and received == [], headers
        assert json.loads(sent[1]["body"]) == {"detail": "missing or wrong API key"}


def test_invalid_json_without_key_is_401(make_client):
    client = make_client(api_key="k3y")
    r = client.post("/v1/rollout", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
    assert client.post("/v1/rollout", content=b"{not json", headers={"X-API-Key": "k3y"}).status_code == 422


# ---- 5. queue admission is atomic ------------------------------------------------------------------------------
@pytest.mark.parametrize("database_url", STORES, indirect=True)
def test_store_admission_is_atomic_under_threads(make_store):
    store = make_store()
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def submit() -> None:
        barrier.wait()
        try:
            store.create(b"x" * 3 * 2**20, JobParams(), max_queue=2)
            outcomes.append("ok")
        except QueueFull:
            outcomes.append("full")

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 2 and store.counts()["queued"] == 2
    assert len(list(store.jobs_dir.iterdir())) == 2  # refused uploads leave no files


def test_concurrent_submissions_never_pass_the_limit(make_client):
    gate = threading.Event()
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(gate=gate))
    client = make_client(pipeline=pipe, warmup=False, max_queue=2, retry_after_s=4)
    files = {"file": ("c.mp4", REAL_CLIP.read_bytes() + b"\0" * 3 * 2**20, "video/mp4")}
    held = client.post("/v1/jobs", files=files, data={"stride": "8", "horizon": "1"}).json()["id"]
    wait_state(client, held, "running")

    def post(results: list) -> None:
        results.append(client.post("/v1/jobs", files=files, data={"stride": "8", "horizon": "1"}))

    for _round in range(3):
        results: list = []
        threads = [threading.Thread(target=post, args=(results,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [r.status_code for r in results]
        queued = client.app.state.store.counts()["queued"]
        assert queued <= 2 and sorted(set(codes)) <= [202, 429], codes
        assert all(r.headers["retry-after"] == "4" for r in results if r.status_code == 429)
        for r in results:  # empty the queue for the next round
            if r.status_code == 202:
                assert client.delete(f"/v1/jobs/{r.json()['id']}").status_code == 204
        assert codes.count(202) == 2, codes
    gate.set()


# ---- 6. retention, DELETE and the disk metric ------------------------------------------------------------------
def _finished(store: JobStore, state: JobState, age_s: float, size: int = 1000) -> str:
    job = store.create(b"v" * size, JobParams())
    store.finish(job.id, state)
    with store._db() as db:
        db.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (time.time() - age_s, job.id))
    return job.id


def test_retention_sweep_by_age_and_size(tmp_path):
    store = JobStore(tmp_path)
    old = [_finished(store, s, 10_000) for s in (JobState.succeeded, JobState.failed, JobState.canceled)]
    young = [_finished(store, JobState.succeeded, age) for age in (30, 20, 10)]
    queued = store.create(b"q" * 1000, JobParams()).id
    orphan_old, orphan_new = store.jobs_dir / "orphan-old", store.jobs_dir / "orphan-new"
    for folder in (orphan_old, orphan_new):
        folder.mkdir()
        (folder / "input").write_bytes(b"o" * 10)
    os.utime(orphan_old, (time.time() - 7200, time.time() - 7200))
    deleted = store.sweep(max_age_s=3600, max_bytes=3500)
    # The old ones by age; then, with 4 x 1000 + 20 bytes left > 3500, the oldest young one by size.
    assert set(deleted) == {*old, young[0]}
    assert all(store.get(i) is None and not store.job_dir(i).exists() for i in deleted)
    assert store.get(young[1]) and store.get(young[2]) and store.get(queued).state is JobState.queued
    assert not orphan_old.exists() and orphan_new.exists()
    assert store.disk_bytes == 3 * 1000 + 10  # two young jobs, the queued one, the new orphan


def test_delete_removes_a_finished_job_and_the_disk_metric_follows(make_client):
    client = make_client()
    r = client.post(
        "/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}, data={"stride": "8"}
    )
    job_id = r.json()["id"]
    assert wait_job(client, job_id)["state"] == "succeeded"

    def disk() -> float:
        return metric(client.get("/metrics").text, "semworld_job_disk_bytes")

    before = disk()
    assert before >= REAL_CLIP.stat().st_size
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert client.get(f"/v1/jobs/{job_id}/result").status_code == 404
    assert not client.app.state.store.job_dir(job_id).exists()
    assert disk() == 0
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 404


def test_the_worker_sweeps_expired_jobs(make_client):
    client = make_client(job_retention_s=0.5, retention_sweep_s=0.2)
    r = client.post(
        "/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}, data={"stride": "8"}
    )
    job_id = r.json()["id"]
    wait_job(client, job_id)
    deadline = time.monotonic() + 10
    while client.get(f"/v1/jobs/{job_id}").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404


# ---- 7. blocking file work off the event loop ------------------------------------------------------------------
def test_job_upload_is_written_off_the_event_loop(make_client):
    client = make_client()
    store = client.app.state.store
    where: list[bool] = []
    create = store.create

    def watched(*args, **kwargs):
        try:
            asyncio.get_running_loop()
            where.append(True)  # on the event loop: it would block every other request
        except RuntimeError:
            where.append(False)
        return create(*args, **kwargs)

    store.create = watched
    r = client.post(
        "/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}, data={"stride": "8"}
    )
    assert r.status_code == 202 and where == [False]


# ---- 2 and 9: ranges, coercions, echoes, HEAD, still images ----------------------------------------------------
def _image(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("form", "data", "detail"),
    [
        ({"state_rate": "inf", "output": "mp4"}, None, "state_rate: Input should be a finite number"),
        (
            {"state_rate": "3e9", "output": "zip"},
            None,
            "state_rate: Input should be less than or equal to 240",
        ),
        ({"state_rate": "nan"}, None, "state_rate: Input should be a finite number"),
        ({"horizon": ""}, None, "horizon: empty; leave the field out"),
        ({"seed": str(2**70)}, None, "seed: Input should be less than or equal to"),
        ({"seed": "-1"}, None, "seed: Input should be greater than or equal to 0"),
        ({}, _image("PNG"), "file: a PNG still image, not a video"),
        ({}, _image("JPEG"), "file: a JPEG still image, not a video"),
    ],
)
def test_small_defects_are_422_naming_the_field(make_client, form, data, detail):
    client = make_client()
    r = client.post(
        "/v1/predict", files={"file": ("c.mp4", data or REAL_CLIP.read_bytes(), "video/mp4")}, data=form
    )
    assert r.status_code == 422 and detail in r.json()["detail"], r.text


def test_long_job_id_is_not_echoed_and_head_health(make_client):
    client = make_client()
    r = client.get("/v1/jobs/" + "a" * 8000)
    assert r.status_code == 404 and len(r.text) < 120 and "aaaaaaaaaa" not in r.text
    assert client.head("/health").status_code == 200 and client.head("/ready").status_code == 200

"""One HTTP contract, two engines: the same requests against `semworld serve` (uvicorn, one process) and
`semworld serve --ray` (Ray Serve, two replicas of the pipeline behind Ray's proxy): answers, limits, auth,
deadlines, jobs, metrics and error bodies must not differ."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from api.jobs import JobStore
from tests.api.conftest import REAL_CLIP, Server, launch

pytestmark = pytest.mark.integration

KEY = "s3cret-key"
ENGINES = {  # engine: (arguments of `semworld serve`, the job store)
    "plain": ([], "sqlite"),
    "ray": (["--ray", "--replicas", "2"], "sqlite"),  # two replicas sharing one SQLite file
    "ray-postgres": (["--ray", "--replicas", "2"], "postgres"),
}


@pytest.fixture(scope="module", params=list(ENGINES))
def server(request, tmp_path_factory) -> Iterator[Server]:
    args, store = ENGINES[request.param]
    if "--ray" in args:
        pytest.importorskip("ray.serve", reason="Ray Serve is the optional `distributed` extra")
    folder = tmp_path_factory.mktemp(request.param)
    env = {
        "SEMWORLD_API_KEY": KEY,
        "SEMWORLD_REQUEST_TIMEOUT_S": "1.5",
        "FAKE_RENDER_DELAY": "0.5",  # per render batch of 8 frames: horizon 32 takes 2 s, past the deadline
        "SEMWORLD_RAY_NUM_CPUS": "0.5",  # two replicas on a 2-core machine
        "SEMWORLD_RAY_LOCAL_CPUS": "2",
        "SEMWORLD_JOB_LEASE_S": "2",  # a killed replica's job runs again within seconds
        "SEMWORLD_JOB_HEARTBEAT_S": "0.5",
    }
    cluster = None
    if store == "postgres":
        cluster = request.getfixturevalue("pg_cluster")
        database = cluster.create_database()
        env["SEMWORLD_DATABASE_URL"] = cluster.url(database)
    s = launch(folder, args=args, **env)
    yield s
    s.stop(signal.SIGTERM)
    assert s.proc.returncode in (0, -signal.SIGTERM) and "Traceback" not in s.log.read_text()  # a clean stop


@pytest.fixture
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers={"X-API-Key": KEY}) as c:
        yield c


def post(c: httpx.Client, data: bytes, path: str = "/v1/predict", ctype: str = "video/mp4", **form: str):
    return c.post(
        path, files={"file": ("clip.mp4", data, ctype)}, data={"horizon": "2", "stride": "4", **form}
    )


def test_answers_and_errors_are_the_same(client):
    r = post(client, REAL_CLIP.read_bytes())
    assert r.status_code == 200, r.text
    assert len(r.json()["observed_states"]) == 4 and len(r.json()["frames"]) == 2
    r = client.post("/v1/rollout", json={"states": ["a", "b", "c"], "horizon": 2})
    assert r.status_code == 200 and len(r.json()["predicted_states"]) == 2, r.text
    cases = [
        (post(client, b"\x00\x01corrupt" * 300), 422, "file: not a readable video"),
        (post(client, b""), 422, "file: the file is empty"),
        (post(client, os.urandom(200_000)), 413, "larger than the limit of 0.1 MB"),
        (post(client, b"<html></html>", ctype="text/html"), 415, "expected a video"),
        (post(client, REAL_CLIP.read_bytes(), horizon="0"), 422, "horizon"),
        (client.get("/v1/jobs/nope"), 404, "no job 'nope'"),
        (client.put("/v1/predict"), 405, "Method Not Allowed"),
    ]
    for r, code, detail in cases:
        assert r.status_code == code, (code, r.text)
        assert detail in r.json()["detail"] and "Traceback" not in r.text


def test_auth_deadline_and_metrics(client, server):
    r = httpx.post(f"{server.url}/v1/rollout", json={"states": ["a"], "horizon": 1})
    assert r.status_code == 401 and r.json() == {"detail": "missing or wrong API key"}
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}  # no key needed
    t = time.monotonic()
    r = post(client, REAL_CLIP.read_bytes(), horizon="32")
    assert r.status_code == 504 and "longer than 1.5 s" in r.json()["detail"], r.text
    assert time.monotonic() - t < 10
    text = client.get("/metrics").text
    assert "semworld_stage_seconds_bucket" in text
    if "--ray" in server.proc.args:  # one scrape answers for every replica, each sample labelled with its own
        assert len(set(re.findall(r'replica="([^"]+)"', text))) == 2


def test_jobs_run_once_each_and_cancel(client):
    ids = [post(client, REAL_CLIP.read_bytes(), path="/v1/jobs", horizon="3").json()["id"] for _ in range(4)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = [client.get(f"/v1/jobs/{i}").json() for i in ids]
        if all(j["state"] == "succeeded" for j in jobs):
            break
        time.sleep(0.1)
    assert [(j["state"], j["attempts"]) for j in jobs] == [("succeeded", 1)] * 4
    for i in ids:  # any replica answers for any job
        body = client.get(f"/v1/jobs/{i}/result", params={"format": "json"}).json()
        assert len(body["predicted_states"]) == 3
    listed = client.get("/v1/jobs", params={"limit": 10}).json()
    assert {j["id"] for j in listed["data"]} >= set(ids)

    slow = post(client, REAL_CLIP.read_bytes(), path="/v1/jobs", horizon="32").json()["id"]
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{slow}").json()["state"] != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    r = client.delete(f"/v1/jobs/{slow}")  # running: asked to stop within a batch
    assert r.status_code == 202 and r.json()["cancel_requested"], r.text
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{slow}").json()["state"] != "canceled" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get(f"/v1/jobs/{slow}").json()["state"] == "canceled"


def test_a_killed_replica_s_job_finishes_on_the_other_once(client, server):
    """kill -9 the replica running a job: the other replica runs it again after the job's lease; it ends
    succeeded, run twice in all (attempts 2), one result, no partial folder."""
    if "--ray" not in server.proc.args:
        pytest.skip("one process: nothing survives a kill -9 (tests/api/test_server.py restarts it)")
    job = post(client, REAL_CLIP.read_bytes(), path="/v1/jobs", horizon="32").json()["id"]
    store = JobStore(server.data_dir, server.database_url)
    deadline = time.monotonic() + 30
    while (row := store.get(job)) is not None and row.state != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert row is not None and row.state == "running" and row.owner
    os.kill(int(row.owner.split("-")[-2]), signal.SIGKILL)  # owner: host-pid-random
    deadline = time.monotonic() + 60
    while client.get(f"/v1/jobs/{job}").json()["state"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.2)
    done = client.get(f"/v1/jobs/{job}").json()
    assert done["state"] == "succeeded" and done["attempts"] == 2, done
    assert (
        len(client.get(f"/v1/jobs/{job}/result", params={"format": "json"}).json()["predicted_states"]) == 32
    )
    assert sorted(p.name for p in (server.data_dir / "jobs" / job).iterdir()) == ["input", "result"]
    store.close()

"""One HTTP contract, two engines: the same requests against `semworld serve` (uvicorn, one process) and
`semworld serve --ray` (Ray Serve, two replicas of the pipeline behind Ray's proxy): answers, limits, auth,
deadlines, jobs, metrics and error bodies must not differ."""

from __future__ import annotations

import os
import re
import signal
import sys
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
        "SEMWORLD_JOB_LEASE_S": "4",  # a killed replica's job runs again within seconds
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
    assert post(client, REAL_CLIP.read_bytes()).status_code == 200  # some stage timings to scrape
    text = client.get("/metrics").text
    assert "semworld_stage_seconds_bucket" in text
    if "--ray" in server.proc.args:  # one scrape answers for every replica, each sample labelled with its own
        assert len(set(re.findall(r'replica="([^"]+)"', text)) - {"all"}) == 2
        assert 'semworld_metrics_replicas_missing{replica="all"} 0.0' in text


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


@pytest.mark.parametrize("server", ["ray", "ray-postgres"], indirect=True)  # (one process: test_server.py)
def test_a_killed_replica_s_job_runs_again_after_its_lease(client, server):
    """kill -9 the replica running a job: after the job's lease a live replica (the other one, or the killed
    one restarted by Ray) runs it again; it ends succeeded, run twice in all (attempts 2), by another process,
    one result, no partial folder."""
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
    assert store.get(job).owner != row.owner
    assert (
        len(client.get(f"/v1/jobs/{job}/result", params={"format": "json"}).json()["predicted_states"]) == 32
    )
    assert sorted(p.name for p in (server.data_dir / "jobs" / job).iterdir()) == ["input", "result"]
    store.close()


def test_ray_settings_give_fixed_replicas_or_an_autoscaler(monkeypatch):
    from api.ray_serve import RaySettings

    fixed = RaySettings(replicas=3, num_gpus=1).deployment_options()
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 1.0}
    monkeypatch.setenv("SEMWORLD_RAY_MAX_REPLICAS", "4")
    monkeypatch.setenv("SEMWORLD_RAY_TARGET_ONGOING_REQUESTS", "3")
    auto = RaySettings().deployment_options()
    assert "num_replicas" not in auto
    assert auto["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 3.0,
    }


def test_bad_ray_settings_are_one_line(tmp_path):
    import subprocess

    from tests.api.conftest import REPO

    def serve(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", *args], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO), **env})  # fmt: skip

    run = serve("--replicas", "2")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--replicas needs --ray" in run.stderr
    pytest.importorskip("ray.serve", reason="Ray Serve is the optional `distributed` extra")
    for run, says in [
        (serve("--ray", SEMWORLD_RAY_MIN_REPLICAS="3", SEMWORLD_RAY_MAX_REPLICAS="2"),
         "RaySettings: min_replicas (3) is above max_replicas (2)"),
        (serve("--ray", SEMWORLD_RAY_NUM_GPUS="-1"), "RaySettings: num_gpus: Input should be greater than"),
    ]:  # fmt: skip
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and says in run.stderr, run.stderr


def test_ray_missing_is_one_line(monkeypatch, capsys):
    from pipeline.cli import main

    monkeypatch.setitem(sys.modules, "ray.serve", None)  # as if the `distributed` extra were not installed
    assert main(["serve", "--ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ray needs Ray Serve: pip install 'semworld[distributed]'" in err


def test_replicas_that_cannot_load_the_models_end_the_server_in_one_line(tmp_path):
    pytest.importorskip("ray.serve", reason="Ray Serve is the optional `distributed` extra")
    import subprocess

    from tests.api.conftest import REPO, free_port

    env = {**os.environ, "PYTHONPATH": str(REPO), "SEMWORLD_DATA_DIR": str(tmp_path / "data"),
           "SEMWORLD_PIPELINE_FACTORY": "tests.fakes:no_such_factory", "SEMWORLD_RAY_LOCAL_CPUS": "2"}  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "serve", "--ray", "--port", str(free_port()), "--log-level", "error"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 2 and last.startswith("semworld: error: semworld did not start on Ray Serve"), (
        last
    )

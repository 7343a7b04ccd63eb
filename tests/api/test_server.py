"""The real server: `semworld serve` (uvicorn, one worker) in a subprocess on 127.0.0.1, httpx as the client.

The stages are the stand-ins of tests/api/fakes.py, chosen through SEMWORLD_PIPELINE_FACTORY; one slow test
runs tiny real weights instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ASSETS, REAL_CLIP

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

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


@pytest.fixture
def start_server(tmp_path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(data_dir: Path | None = None, weights: Path | None = None, **env: str) -> Server:
        port = free_port()
        full_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SEMWORLD_DATA_DIR": str(data_dir or tmp_path / "data"),
            "SEMWORLD_SAMPLES_DIR": str(ASSETS),
            "SEMWORLD_MAX_SYNC_UPLOAD_MB": "0.1",
            "OMP_NUM_THREADS": "1",
            **env,
        }
        if weights is None:
            full_env["SEMWORLD_PIPELINE_FACTORY"] = "tests.api.fakes:make_pipeline"
        else:
            full_env["SEMWORLD_WEIGHTS_DIR"] = str(weights)
        log = tmp_path / f"server-{port}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "warning"],
            cwd=REPO, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        server = Server(proc, f"http://127.0.0.1:{port}", log)
        servers.append(server)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"server exited: {log.read_text()[-2000:]}"
            try:
                r = httpx.get(f"{server.url}/ready", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if r.status_code == 200:
                return server
            assert not r.json()["detail"].startswith("failed"), r.json()["detail"]
            time.sleep(0.2)
        raise AssertionError(f"server not ready: {log.read_text()[-2000:]}")

    yield start
    for s in servers:
        s.stop(signal.SIGKILL)


def post(client: httpx.Client, data: bytes, ctype: str = "video/mp4", path: str = "/v1/predict", **form):
    form = {"horizon": "2", **form}
    return client.post(path, files={"file": ("clip.mp4", data, ctype)}, data=form)


def test_real_server_answers_clips_and_rejects_bad_input(start_server, world_clip):
    server = start_server()
    with server.client() as c:
        assert c.get("/health").json() == {"status": "ok"}
        r = post(c, REAL_CLIP.read_bytes(), stride="4")
        assert r.status_code == 200 and len(r.json()["observed_states"]) == 4 and len(r.json()["frames"]) == 2
        r = post(c, world_clip.read_bytes(), stride="5", output="mp4")
        assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"

        cases = [
            (post(c, b"\x00\x01corrupt" * 300), 422, "not a readable video"),
            (post(c, b""), 422, "file: the file is empty"),
            (post(c, os.urandom(200_000)), 413, "larger than the limit of 0.1 MB"),
            (post(c, b"<html></html>", ctype="text/html"), 415, "expected a video"),
            (c.post("/v1/predict", json={"horizon": 2}), 422, "file: Field required"),
        ]
        for r, code, detail in cases:
            assert r.status_code == code, r.text
            assert detail in r.json()["detail"] and "Traceback" not in r.text
        assert "semworld_stage_seconds_bucket" in c.get("/metrics").text
        assert c.get("/").status_code == 200
    assert "Traceback" not in server.log.read_text()


def test_restart_after_a_crash_runs_queued_and_interrupted_jobs(start_server, tmp_path):
    data = tmp_path / "jobs"
    first = start_server(data_dir=data, FAKE_RENDER_DELAY="0.4")  # ~0.8 s per job of 4 states
    with first.client() as c:
        ids = [post(c, REAL_CLIP.read_bytes(), path="/v1/jobs", horizon="4", stride="4").json()["id"]
               for _ in range(3)]  # fmt: skip
        deadline = time.monotonic() + 30
        while c.get(f"/v1/jobs/{ids[0]}").json()["state"] != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        states = [c.get(f"/v1/jobs/{i}").json()["state"] for i in ids]
    first.stop(signal.SIGKILL)  # a crash: no shutdown hook runs
    assert states[0] == "running" and states[2] == "queued", states

    second = start_server(data_dir=data)
    with second.client() as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = [c.get(f"/v1/jobs/{i}").json() for i in ids]
            if all(j["state"] == "succeeded" for j in jobs):
                break
            assert not any(j["state"] == "failed" for j in jobs), jobs
            time.sleep(0.1)
        assert [j["state"] for j in jobs] == ["succeeded"] * 3
        assert jobs[0]["attempts"] == 2  # interrupted mid-run, then run again
        for i in ids:
            body = c.get(f"/v1/jobs/{i}/result").json()
            assert len(body["predicted_states"]) == 4 and len(body["frames"]) == 4


@pytest.mark.slow
def test_real_server_with_tiny_real_weights(start_server, tiny_weights):
    server = start_server(weights=tiny_weights)
    with server.client() as c:
        r = post(c, REAL_CLIP.read_bytes(), stride="8", horizon="2")
        assert r.status_code == 200, r.text
        assert len(r.json()["predicted_states"]) == 2 and len(r.json()["frames"]) == 2
        r = c.post("/v1/rollout", json={"states": r.json()["predicted_states"], "horizon": 1})
        assert r.status_code == 200 and len(r.json()["frames"]) == 1

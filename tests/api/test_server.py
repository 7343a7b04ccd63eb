"""The real server: `semworld serve` (uvicorn, one worker) in a subprocess on 127.0.0.1, httpx as the client.

The stages are the stand-ins of tests/fakes.py, chosen through SEMWORLD_PIPELINE_FACTORY; one slow test
runs tiny real weights instead.
"""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.api.conftest import REAL_CLIP

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers


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
            (post(c, b"\x00\x01corrupt" * 300), 422, "file: not a readable video"),
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

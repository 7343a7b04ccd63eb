"""Faults against the real server (`semworld serve` in a subprocess): kill -9 while jobs are queued and running,
kill -9 in the middle of writing a result, and SIGTERM while a job runs. After a restart every job is there
exactly once, finished or cleanly failed, and no file is half-written."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import REAL_CLIP

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers


def submit(c: httpx.Client, **form) -> str:
    form = {"horizon": "4", "stride": "4", **form}
    r = c.post("/v1/jobs", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}, data=form)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def rows(data: Path) -> dict[str, tuple[str, int]]:
    with sqlite3.connect(data / "jobs.sqlite3") as db:
        found = db.execute("SELECT id, state, attempts FROM jobs").fetchall()
    ids = [r[0] for r in found]
    assert len(ids) == len(set(ids))
    return {r[0]: (r[1], r[2]) for r in found}


def no_half_files(data: Path) -> None:
    """Nothing partial anywhere: no result.partial folder, no temporary file, every result JSON complete."""
    for path in (data / "jobs").rglob("*"):
        assert not path.name.startswith("result.partial") and not path.name.endswith(".tmp"), path
        if path.name == "result.json":
            json.loads(path.read_text())


def wait_all(c: httpx.Client, ids: list[str], timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [c.get(f"/v1/jobs/{i}").json() for i in ids]
        if all(j["state"] in ("succeeded", "failed", "canceled") for j in jobs):
            return jobs
        time.sleep(0.1)
    raise AssertionError(f"jobs did not finish: {jobs}")


def test_kill_9_during_the_result_write(start_server, tmp_path):
    data = tmp_path / "data"
    first = start_server(
        data_dir=data, FAULT="result-write", SEMWORLD_PIPELINE_FACTORY="tests.api.faults:make_pipeline"
    )
    with first.client() as c:
        job = submit(c, output="mp4")
    first.proc.wait(30)
    assert first.proc.returncode == -signal.SIGKILL  # it died inside the write
    (partial,) = (data / "jobs" / job).glob("result.partial-*")  # the dead run's own partial folder
    assert any(p.name.endswith(".tmp") for p in partial.iterdir()), "the fault did not hit the write"
    assert not (data / "jobs" / job / "result").exists() and rows(data)[job][0] == "running"

    second = start_server(data_dir=data)
    with second.client() as c:
        (done,) = wait_all(c, [job])
        assert done["state"] == "succeeded" and done["attempts"] == 2
        assert c.get(f"/v1/jobs/{job}/result").content[4:8] == b"ftyp"
        assert len(c.get(f"/v1/jobs/{job}/result", params={"format": "json"}).json()["frames"]) == 4
    assert rows(data) == {job: ("succeeded", 2)}
    no_half_files(data)


@pytest.mark.slow  # the fast suite has the same fault in tests/api/test_server.py
def test_kill_9_with_queued_and_running_jobs(start_server, tmp_path):
    data = tmp_path / "data"
    first = start_server(data_dir=data, FAKE_STEP_DELAY="0.1")
    with first.client() as c:
        ids = [submit(c) for _ in range(4)]
        deadline = time.monotonic() + 30
        while c.get(f"/v1/jobs/{ids[0]}").json()["state"] != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
    first.stop(signal.SIGKILL)
    before = rows(data)
    assert before[ids[0]][0] == "running" and [before[i][0] for i in ids[1:]] == ["queued"] * 3

    second = start_server(data_dir=data)
    with second.client() as c:
        jobs = wait_all(c, ids)
    assert [j["state"] for j in jobs] == ["succeeded"] * 4
    assert [j["attempts"] for j in jobs] == [2, 1, 1, 1]
    assert set(rows(data)) == set(ids)
    no_half_files(data)


@pytest.mark.slow  # the fast suite has the same shutdown through TestClient in tests/api/test_jobs.py
def test_sigterm_requeues_the_running_job(start_server, tmp_path):
    data = tmp_path / "data"
    first = start_server(data_dir=data, FAKE_STEP_DELAY="0.2")  # 8 frames x 4 steps: ~6 s of work
    with first.client() as c:
        job = submit(c, horizon="8")
        deadline = time.monotonic() + 30
        while c.get(f"/v1/jobs/{job}").json()["progress"]["render"]["total"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    t0 = time.monotonic()
    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(20)
    # uvicorn drains, runs the shutdown, then exits by the signal it got (-15); within a step, not a whole job
    assert first.proc.returncode in (0, -signal.SIGTERM) and time.monotonic() - t0 < 5
    assert "Traceback" not in first.log.read_text()
    assert rows(data) == {job: ("queued", 0)}  # back in the queue; the interrupted run is not counted

    second = start_server(data_dir=data)
    with second.client() as c:
        (done,) = wait_all(c, [job])
    assert done["state"] == "succeeded" and done["attempts"] == 1
    no_half_files(data)

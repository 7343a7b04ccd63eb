"""The jobs' disk fills up mid-job (a real 4 MB tmpfs where this machine can mount one): that job fails with a
clear error and leaves nothing half-written, /ready says why while the disk stays full, new jobs get a 503,
synchronous requests carry on, and once space is freed everything works again."""

from __future__ import annotations

import errno
import subprocess
import threading
from pathlib import Path

import pytest

from api.jobs import DISK_FULL
from pipeline.world_model import WorldModelPipeline
from tests.api.conftest import REAL_CLIP, wait_job, wait_state
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer


@pytest.fixture
def small_disk(tmp_path) -> Path:
    folder = tmp_path / "jobs"
    folder.mkdir()
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    if run.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {run.stderr.decode().strip() or run.returncode}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Write one file until the disk refuses another byte."""
    filler = folder / "filler"
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as err:
            assert err.errno == errno.ENOSPC
    return filler


def submit(client, **form):
    files = {"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")}
    return client.post("/v1/jobs", files=files, data={"horizon": "3", "stride": "4", **form})


def test_a_full_disk_fails_the_job_cleanly_and_the_service_carries_on(make_client, small_disk, tmp_path):
    gate = threading.Event()
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(gate=gate))
    client = make_client(
        pipeline=pipe, data_dir=tmp_path / "data", jobs_dir=small_disk, min_free_mb=0.5, warmup=False
    )
    held = submit(client).json()["id"]
    wait_state(client, held, "running")
    filler = fill(small_disk)  # the disk fills up while the job renders
    gate.set()
    done = wait_job(client, held)
    assert done["state"] == "failed" and done["error"] == DISK_FULL
    assert sorted(p.name for p in (small_disk / held).iterdir()) == ["input"]  # no partial result left

    r = client.get("/ready")
    assert r.status_code == 503 and r.json()["detail"].startswith("data disk full: ")
    r = submit(client)
    assert r.status_code == 503 and r.headers["retry-after"] and "no space left" in r.json()["detail"]
    r = client.post("/v1/predict", files={"file": ("c.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
                    data={"horizon": "2", "stride": "4"})  # fmt: skip
    assert r.status_code == 200 and len(r.json()["predicted_states"]) == 2  # needs no disk

    filler.unlink()
    assert client.get("/ready").status_code == 200
    again = submit(client).json()["id"]
    assert wait_job(client, again)["state"] == "succeeded"

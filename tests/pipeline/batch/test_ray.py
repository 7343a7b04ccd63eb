"""The Ray Data engine on a two-CPU Ray instance bound to loopback, with Ray's files in the test's temporary
folder: tiny random real stages, the same states (and frames) as the local engine, per-clip failures, and clips
complete in OUT filtered out before a rerun starts."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pipeline.batch.jobs import BatchSettings, collect_jobs
from pipeline.batch.runner import EngineOptions, run_batch

ray = pytest.importorskip("ray", reason="Ray is the optional `distributed` extra")


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    from tests.fakes import build_tiny_weights

    return build_tiny_weights(tmp_path_factory.getbasetemp() / "semworld-tiny-weights")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    temp = tmp_path_factory.mktemp("ray")  # short: Ray's socket paths live under it
    ray.init(
        num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False,
        _node_ip_address="127.0.0.1", _temp_dir=str(temp),
    )  # fmt: skip
    yield
    ray.shutdown()


@pytest.mark.slow  # about 100 s on two shared cores: Ray start, three model actors
def test_ray_gives_the_local_states_and_frames(ray_cluster, tiny_weights, world_clips, tmp_path):
    inputs = tmp_path / "in"
    shutil.copytree(world_clips / "clips", inputs)
    (inputs / "corrupt.mp4").write_bytes(b"not a video" * 50)
    settings = {"horizon": 2, "stride": 4, "weights": tiny_weights, "device": "cpu"}
    local = BatchSettings(out=tmp_path / "local", **settings)
    remote = BatchSettings(out=tmp_path / "ray", **settings)
    jobs = collect_jobs([str(inputs)], local)

    a = run_batch(jobs, local, EngineOptions(progress=False, threads=1))
    b = run_batch(
        jobs, remote, EngineOptions(progress=False, ray=True, ray_stages={"predict": {"batch_size": 2}})
    )
    assert a["counts"] == b["counts"] == {"ok": 4, "skipped": 0, "failed": 1}
    assert b["engine"] == "ray" and b["failed"] == ["corrupt"]
    assert [c["error"] for c in b["clips"] if c["status"] == "failed"] == [
        f"decode: {inputs / 'corrupt.mp4'}: not a readable video"
    ]
    assert (local.out / "states.jsonl").read_text() == (remote.out / "states.jsonl").read_text()
    for job in jobs[:4]:
        for name in ("states.json", "predicted_000.png", "predicted_001.png", "strip.png"):
            assert (local.out / job.name / name).read_bytes() == (
                remote.out / job.name / name
            ).read_bytes(), name
    record = json.loads((remote.out / "000001" / "clip.json").read_text())
    assert set(record["timings"]) == {"decode", "caption", "predict", "render", "write"}

    # Rerun: complete clips are filtered out before the Ray run; only the failed one goes through again.
    c = run_batch(jobs, remote, EngineOptions(progress=False, ray=True))
    assert c["counts"] == {"ok": 0, "skipped": 4, "failed": 1}
    assert (local.out / "states.jsonl").read_text() == (remote.out / "states.jsonl").read_text()

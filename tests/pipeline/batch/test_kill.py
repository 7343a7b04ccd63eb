"""A real `semworld batch` process killed with SIGKILL mid-run, then rerun: every clip ends up processed exactly
once (complete ones are not redone, the rest are done), nothing half-written is left, and the corpus lists each
clip once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.batch.conftest import FACTORY

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[3]


def start(inputs: Path, out: Path, workers: int, delay: float) -> subprocess.Popen:
    env = {
        **os.environ,
        "SEMWORLD_PIPELINE_FACTORY": FACTORY,
        "FAKE_RENDER_DELAY": str(delay),  # seconds per render batch of the stand-in renderer
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
    }
    argv = [sys.executable, "-m", "pipeline.cli", "batch", str(inputs), "--out", str(out), "-k", "3",
            "--stride", "4", "--no-progress", "--workers", str(workers), "--threads", "1"]  # fmt: skip
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def done_clips(out: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in out.glob("*/clip.json")}


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_kill_9_then_rerun_processes_every_clip_exactly_once(world_clips, tmp_path, workers):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for copy in ("a", "b"):
        for clip in sorted((world_clips / "clips").glob("*.mp4")):
            shutil.copy(clip, inputs / f"{copy}{clip.name}")
    names = sorted(p.stem for p in inputs.iterdir())  # 8 clips
    out = tmp_path / "out"

    proc = start(inputs, out, workers, delay=0.4)
    deadline = time.monotonic() + 90
    while len(done_clips(out)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stdout.read().decode()}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.3)  # a worker still writing (workers=2) dies with its parent
    before = done_clips(out)
    assert 2 <= len(before) < len(names)
    assert not (out / "summary.json").exists()  # killed before the end: no summary yet

    proc = start(inputs, out, workers, delay=0.0)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, output
    summary = json.loads((out / "summary.json").read_text())
    status = {c["name"]: c["status"] for c in summary["clips"]}
    assert sorted(status) == names
    assert {n for n, s in status.items() if s == "skipped"} == set(before)  # not processed a second time
    assert {n for n, s in status.items() if s == "ok"} == set(names) - set(before)
    after = done_clips(out)
    assert {n: after[n] for n in before} == before  # the first run's records were left as they were
    lines = [json.loads(s) for s in (out / "states.jsonl").read_text().splitlines()]
    assert [r["id"] for r in lines] == names  # each clip once, in input order
    for name in names:
        files = {p.name for p in (out / name).iterdir()}
        assert {"clip.json", "states.json", "predicted.mp4", "strip.png", "predicted_002.png"} <= files
        assert not [f for f in files if f.endswith(".tmp")]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == names  # no scratch folders left over

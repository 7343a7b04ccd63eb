"""bench/gpu.sh --dry-run end to end on the CPU: it finishes, writes gpu.json and gpu.md, and the JSON holds every
part of the GPU benchmark (predictor speeds and rollout, MFU against the matmul peak, the pipeline at batch 1 and a batch
of clips, the targets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[2]


def test_gpu_sh_dry_run(tmp_path):
    out = tmp_path / "gpu"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["bash", str(REPO / "bench/gpu.sh"), "--dry-run", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== summary ==" in proc.stdout and f"wrote {out / 'gpu.json'}" in proc.stdout
    r = json.loads((out / "gpu.json").read_text())
    assert r["dry_run"] is True and r["machine"]["device"] == "cpu"

    paper = r["predictor"]["paper"]
    assert paper["preset"] == "tiny" and paper["params"]["four_tensor"] > 0
    assert paper["train_windows_per_s"]["four_tensor"] > 0 and paper["train_windows_per_s"]["baseline"] > 0
    assert set(paper["state_s"]) == {"b1", "b4"} and paper["state_ratio"]["b1"] > 0
    assert paper["rollout"]["eager_b1"]["state_s"] > 0 and paper["rollout"]["eager_b4"]["state_s"] > 0

    mfu = r["mfu"]
    assert set(mfu["matmul_peak_flops"]) == {"bf16", "fp32"} and mfu["flops_per_step"] > 0
    for dt in ("bf16", "fp32"):
        assert 0 < mfu[dt]["mfu"] and mfu[dt]["achieved_flops"] == mfu["flops_per_step"] / mfu[dt]["step_s"]

    pipe = r["pipeline"]
    assert set(pipe["batch_1"]["median_s"]) >= {"caption", "predict", "render", "total"}
    assert pipe["batch_2_clips"]["predicted_frames_per_s"] > 0
    assert set(r["targets"]) == {"state_b1_ratio", "state_b64_ratio", "train_ratio", "mfu_bf16",
                                 "pipeline_frames_per_s_b16"}  # fmt: skip
    assert r["targets"]["state_b64_ratio"]["value"] is None  # the dry run has no batch 64
    md = (out / "gpu.md").read_text()
    assert "DRY RUN" in md and "## Model FLOP utilisation" in md and "## Targets" in md

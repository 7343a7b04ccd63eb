"""torchrun with two CPU processes (gloo): the replicas end with identical parameters, rank 0 writes the files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import toy_sequences, write_jsonl

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers


def test_two_process_replicas_end_identical(tmp_path):
    data = write_jsonl(tmp_path / "toy.jsonl", toy_sequences(30))
    out = tmp_path / "ddp"
    hashes = tmp_path / "hash"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(Path(__file__).with_name("ddp_worker.py")),
        str(hashes),
        "--data",
        str(data),
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--epochs",
        "2",
        "--batch-size",
        "4",
        "--val-fraction",
        "0.2",
        "--max-windows",
        "24",
        "--no-progress",
        "--device",
        "cpu",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0 = (tmp_path / "hash.four_tensor.rank0").read_text()
    rank1 = (tmp_path / "hash.four_tensor.rank1").read_text()
    assert len(rank0.strip()) == 64 and rank0 == rank1
    assert (out / "model.safetensors").is_file() and (out / "training_summary.json").is_file()
    assert '"world_size": 2' in (out / "training_summary.json").read_text()
    assert proc.stdout.count("selected epoch") == 1  # only rank 0 prints the table

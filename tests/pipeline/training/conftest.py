"""Helpers of the predictor training tests: the arguments of a short tiny run on the toy corpus, the check that a
run killed after its first epoch and resumed ends where an uninterrupted one does, and the two commands (`train
predictor`, `eval predictor --json`) as the tests call them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pipeline import cli
from pipeline.training.args import TrainArgs
from pipeline.training.predictor import CHECKPOINT_DIR, train_predictor


def tiny_run(data: Path, **over: Any) -> dict[str, Any]:
    """TrainArgs keywords (all but `out`) of a short run of the tiny preset on `data`, without a progress bar:
    one epoch of batches of 8, a fifth of the sequences held out; `over` replaces or adds any."""
    return {
        "data": str(data),
        "preset": "tiny",
        "epochs": 1,
        "batch_size": 8,
        "val_fraction": 0.2,
        "progress": False,
        **over,
    }


class Killed(Exception):
    pass


def _kill_after_one(kind: str, epoch: int) -> None:
    if epoch == 1:
        raise Killed


def assert_resume_equals_uninterrupted(
    tmp_path: Path, run: dict[str, Any]
) -> tuple[Any, dict[str, torch.Tensor]]:
    """Train `run` uninterrupted into tmp_path/full, and into tmp_path/cut killed after epoch 1 and then resumed;
    the two must log the same epochs (but for their seconds) and end with the same last checkpoint. Returns the
    uninterrupted run's result and that checkpoint's weights."""
    full = train_predictor(TrainArgs(out=str(tmp_path / "full"), **run))["four_tensor"]
    with pytest.raises(Killed):
        train_predictor(TrainArgs(out=str(tmp_path / "cut"), **run), on_epoch_end=_kill_after_one)
    assert len((tmp_path / "cut" / "train_log.jsonl").read_text().splitlines()) == 1
    resumed = train_predictor(TrainArgs(out=str(tmp_path / "cut"), **run))["four_tensor"]

    def strip(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in history]

    assert strip(resumed.history) == strip(full.history)
    a = torch.load(tmp_path / "full" / CHECKPOINT_DIR / "last.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "cut" / CHECKPOINT_DIR / "last.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    return full, a


def train_cli(data: Path, out: Path, *flags: str) -> None:
    """`semworld train predictor --data DATA --out OUT FLAGS...`, which must succeed."""
    assert cli.main(["train", "predictor", "--data", str(data), "--out", str(out), *flags]) == 0


def eval_json(
    capsys: pytest.CaptureFixture[str], weights: Path, data: Path, split: str = "all"
) -> dict[str, Any]:
    """What `semworld eval predictor --json` prints for `weights` on `data`'s `split`."""
    capsys.readouterr()
    argv = ["eval", "predictor", "--weights", str(weights), "--data", str(data), "--json", "--split", split]
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)

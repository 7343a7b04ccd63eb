"""The out-of-domain warning and the unsure marks go where people look and share, not only on the terminal: a
banner and amber tiles on strip.png, batch's states.jsonl (unsure states are not `predictable`), summary.json and
its terminal table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline import cli
from pipeline.outputs import UNSURE_COLOUR, strip_of
from pipeline.world_model import WorldModelOutput

pytestmark = pytest.mark.integration  # shipped weights, subprocesses or servers

REPO = Path(__file__).resolve().parents[2]
ASSET = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"


def _frame(value: int) -> np.ndarray:
    return np.full((64, 64, 3), value, dtype=np.uint8)


def test_the_strip_carries_the_warning_and_marks_unsure_reads():
    common = dict(observed_states=["a .", "b ."], predicted_states=["c ."], observed_frames=[_frame(0)] * 2,
                  predicted_frames=[_frame(255)], state_rate=2.0, confidence_threshold=-0.01)  # fmt: skip
    sure = strip_of(
        WorldModelOutput(**common, observed_confidence=[-0.001, -0.001], observed_parses=[None, None])
    )
    warned = strip_of(WorldModelOutput(**common, observed_confidence=[-0.5, -0.001], observed_parses=[None, None],
                                       warnings=["most of this clip is unsure"]))  # fmt: skip
    amber = np.array(UNSURE_COLOUR)
    assert not (sure[:4, :4] == amber).all(-1).any()  # no banner without a warning
    assert warned.shape[0] > sure.shape[0] and (warned[2, 2] == amber).all()  # the banner on top
    body = warned[warned.shape[0] - sure.shape[0] :]  # the tiles, below the banner
    assert (body[1, 1] == amber).all()  # the unsure read is framed in amber...
    first = (sure.shape[1] - 6 - 3 * 2) // 3  # tile width (3 tiles, the forecast bar, gaps)
    assert not (body[1, first + 4] == amber).all()  # ...the sure one is not


def test_batch_records_unsure_states_and_the_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(ASSET, videos / "bunny.mp4")  # real footage: the shipped models know only the built-in world
    out = tmp_path / "out"
    assert cli.main(["batch", str(videos), "--out", str(out), "--horizon", "1", "--device", "cpu",
                     "--no-progress"]) == 0  # fmt: skip
    table = capsys.readouterr().out
    record = json.loads((out / "states.jsonl").read_text())
    n = len(record["states"])
    assert record["unsure"] == [True] * n and record["predictable"] == [False] * n
    assert len(record["warnings"]) == 1 and "only know the built-in world" in record["warnings"][0]
    clip = json.loads((out / "summary.json").read_text())["clips"][0]
    assert clip["unsure_states"] == n and clip["warnings"] == record["warnings"]
    assert f"{n}/{n} !" in table and "warning (bunny; marked ! above):" in table
    strip = np.asarray(Image.open(out / "bunny" / "strip.png"))
    assert (strip[2, 2] == np.array(UNSURE_COLOUR)).all()

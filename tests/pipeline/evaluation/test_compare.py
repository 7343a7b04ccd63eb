"""`semworld eval compare`: reading objects back, scoring with oracle stages (whose answers are known), and the
whole command on tiny real stages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.evaluation.compare import (
    METHODS,
    CompareArgs,
    Stages,
    compare,
    object_scores,
    read_objects,
    run_methods,
    score_frames,
)
from pipeline.evaluation.world import read_png, read_world_dir
from pipeline.utils import UserError

WORLD = ("bounce,blink,appear", 3, 12)  # the clips of `world_dir`: 12 states, 4 context + 8 to predict


def test_read_objects_counts_good_items_of_a_broken_caption():
    assert read_objects("red ball top left , blue box bottom right , lamp on .") == {
        ("red", "ball", 0, 0),
        ("blue", "box", 4, 4),
    }
    assert read_objects("empty .") == set()
    assert read_objects("red ball top left , blue blue .") == {("red", "ball", 0, 0)}
    assert read_objects("blue blue .") is None


def test_object_scores_cell_colour_shape_lost_invented():
    truth = "red ball top left , blue box bottom right ."
    s = object_scores("red ball top left , green triangle bottom right .", truth)
    assert s["objects"] == 2 and s["object_hits"] == 1 and s["cell_hits"] == 2
    assert s["colour_hits"] == 1 and s["shape_hits"] == 1
    assert s["lost_count"] == 1 and s["invented_count"] == 1  # blue box lost, green triangle invented
    s = object_scores("red ball top right .", truth)
    assert s["object_hits"] == 0 and s["cell_hits"] == 0 and s["lost_count"] == 1 and s["invented_count"] == 0


class FrameOracle:
    """A captioner that reads world frames perfectly: it knows the frame of every state of the data."""

    def __init__(self, states: list[str], size: int) -> None:
        from world import render_state

        self.table = {render_state(s, size=size).tobytes(): s for s in states}

    def caption(self, frames: list[np.ndarray]) -> list[str]:
        return [self.table.get(np.ascontiguousarray(f).tobytes(), "empty .") for f in frames]


class StateOracle:
    """A predictor that knows every clip's continuation."""

    T = 4

    def __init__(self, clips) -> None:
        self.clips = clips

    def predict(self, states: list[list[str]], k: int, truncate: bool = False) -> list[list[str]]:
        out = []
        for h in states:
            clip = next((c for c in self.clips if c.states[: len(h)] == h), None)
            out.append(clip.states[len(h) : len(h) + k] if clip else ["empty ."] * k)
        return out


class WorldRenderer:
    def __init__(self, size: int) -> None:
        self.size = size

    def render(self, states, generator=None, steps=None, guidance=None, step_callback=None):
        from world import render_state

        return [render_state(s, size=self.size) for s in states]


class CopyPixels:
    context = 4

    def predict_frames(self, contexts, k):
        return [[c[-1].copy() for _ in range(k)] for c in contexts]


def test_scores_with_oracle_stages(world_dir, tmp_path):
    clips = read_world_dir(world_dir)
    all_states = [s for c in clips for s in c.states]
    stages = Stages(FrameOracle(all_states, 64), StateOracle(clips), WorldRenderer(64), CopyPixels())
    contexts = [[read_png(c.frames_dir / f"{k:02d}.png") for k in range(4)] for c in clips]
    truth_frames = [[read_png(c.frames_dir / f"{k:02d}.png") for k in range(4, 12)] for c in clips]
    futures = [c.states[4:12] for c in clips]
    frames, predicted, seconds = run_methods(
        stages, contexts, [c.states[:4] for c in clips], futures, 8, 0, None
    )
    assert set(frames) == set(METHODS) and set(seconds) == set(METHODS)
    assert predicted["semworld"] == futures  # the oracle captioner read the context exactly
    scores, readings = score_frames(
        stages.captioner, frames, truth_frames, futures, ["physics", "memory", "other"]
    )
    for method in ("semworld", "semworld_true_states", "truth"):
        assert scores[method]["all"]["exact"] == 1.0
        assert scores[method]["all"]["psnr"] is None  # identical frames: infinite PSNR
        assert scores[method]["all"]["mse"] == 0.0 and scores[method]["all"]["ssim"] == pytest.approx(1.0)
        assert scores[method]["all"]["lost"] in (0.0, None)
    copy = scores["copy_last"]
    assert copy["all"]["exact"] < 1.0 and copy["all"]["mse"] > 0 and copy["all"]["psnr"] > 0
    assert readings["copy_last"][0][0] == clips[0].states[3]  # copy-last reads as the last context state
    assert set(copy["by_family"]) == {"physics", "memory", "other"}
    assert copy["by_horizon"]["1"]["n"] == 3


def test_compare_on_tiny_real_stages_writes_figures(world_dir, tiny_weights, tmp_path):
    from models.pixel import PixelConfig, PixelModel

    torch.manual_seed(0)
    PixelModel(PixelConfig(image_size=32, hid_s=4, hid_t=8, translator_blocks=1, kernel=3)).save_pretrained(
        tmp_path / "pixel" / "model"
    )
    args = CompareArgs(data=str(world_dir), weights=str(tiny_weights), pixel=str(tmp_path / "pixel"), clips=2,
                       steps=1, figures=str(tmp_path / "img"), grid_clips=2, threads=1)  # fmt: skip
    result = compare(args)
    assert result["clips"] == 2 and result["horizon"] == 8
    assert not (tmp_path / "cache").exists()
    again = compare(CompareArgs(**{**args.__dict__, "cache": str(tmp_path / "cache"), "figures": None}))
    assert (tmp_path / "cache" / "semworld.npz").is_file()
    assert again["methods"]["semworld"]["all"] == result["methods"]["semworld"]["all"]
    assert set(result["methods"]) == set(METHODS)
    assert all(len(m["by_horizon"]) == 8 for m in result["methods"].values())
    assert result["methods"]["copy_last"]["by_horizon"]["1"]["mse"] >= 0
    for name in ("semantic_vs_pixel_horizon.png", "semantic_vs_pixel_frames.png"):
        assert (tmp_path / "img" / name).stat().st_size > 1000
    json.dumps(result)  # every figure in it is plain JSON


def test_compare_cli_and_clear_errors(world_dir, tiny_weights, tmp_path):
    from pipeline.cli import main

    with pytest.raises(UserError, match="--horizon"):
        CompareArgs(data=str(world_dir), horizon=0)
    with pytest.raises(UserError, match=">= 20 states"):
        from models.pixel import PixelConfig, PixelModel

        PixelModel(
            PixelConfig(image_size=32, hid_s=4, hid_t=8, translator_blocks=1, kernel=3)
        ).save_pretrained(tmp_path / "p")
        compare(
            CompareArgs(data=str(world_dir), weights=str(tiny_weights), pixel=str(tmp_path / "p"), horizon=16)
        )
    out = tmp_path / "r.json"
    code = main(["eval", "compare", "--data", str(world_dir), "--weights", str(tiny_weights), "--pixel",
                 str(tmp_path / "p"), "--clips", "1", "--steps", "1", "--horizon", "2", "--out", str(out), "--markdown", str(tmp_path / "r.md")])  # fmt: skip
    assert code == 0 and json.loads(out.read_text())["clips"] == 1
    md = (tmp_path / "r.md").read_text()
    assert (
        "| method | h=1 | h=2 | all |" in md and "| copy_last |" in md and "Seconds per predicted frame" in md
    )


@pytest.mark.integration
def test_compare_runs_with_the_shipped_stack(world_dir, tmp_path):
    """The shipped predictor reads a window of 8 and the shipped pixel model 4 frames: every method forecasts
    from the same step, each reading what it needs (this once stopped with '--pixel reads 4 frames ...')."""
    from pipeline.cli import main

    repo = Path(__file__).resolve().parents[3]
    out = tmp_path / "r.json"
    code = main(["eval", "compare", "--data", str(world_dir), "--weights", str(repo / "weights"), "--pixel",
                 str(repo / "weights" / "pixel"), "--clips", "2", "--steps", "1", "--horizon", "2", "--out",
                 str(out)])  # fmt: skip
    assert code == 0
    result = json.loads(out.read_text())
    assert result["predictor_window"] == 8 and result["pixel_context"] == 4 and result["context"] == 4
    assert set(result["methods"]) == set(METHODS) and result["methods"]["truth"]["all"]["exact"] == 1.0
    with pytest.raises(UserError, match="--context 2: the pixel model reads 4 frames"):
        compare(CompareArgs(data=str(world_dir), weights=str(repo / "weights"), pixel=str(repo / "weights" / "pixel"),
                            context=2))  # fmt: skip

"""Outputs people would rather look at: strip.png (aspect kept, whole states, rows, given states drawn), the
context-then-forecast MP4, forecast beside truth, and the timeline of changes in states.json."""

from __future__ import annotations

import json

import numpy as np

from pipeline.outputs import make_strip, side_by_side, story_frames, strip_of, write_outputs
from pipeline.video import read_video
from pipeline.world_model import WorldModelOutput, WorldModelPipeline
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer


def _square(colour=(255, 0, 0), side=32) -> np.ndarray:
    return np.full((side, side, 3), colour, dtype=np.uint8)


def test_predicted_frames_keep_their_aspect_beside_wide_observed_ones():
    wide = np.zeros((36, 64, 3), dtype=np.uint8)
    strip = make_strip([wide], ["a."], [_square()], ["b."], height=72, max_width=10_000)
    red = (strip[..., 0] > 200) & (strip[..., 1] < 50)
    ys, xs = np.nonzero(red[:72])
    assert abs((xs.max() - xs.min()) - (ys.max() - ys.min())) <= 2  # a square stays square, not an oval


def test_long_runs_wrap_into_rows_and_long_states_are_shown_whole():
    frames = [_square((0, 0, 200))] * 40
    strip = make_strip(frames[:20], ["x ."] * 20, frames[20:], ["y ."] * 20, max_width=1600)
    assert strip.shape[1] <= 1600 and strip.shape[0] > 3 * 112  # several rows, not 6,000 px wide
    short = make_strip([], [], [_square()], ["a ."])
    long = make_strip([], [], [_square()], [" ".join(["word"] * 60) + " ."])
    assert long.shape[0] > short.shape[0] + 100  # every line of the state, none cut


def test_states_given_in_words_are_drawn_and_the_timeline_goes_into_states_json(tmp_path):
    pipe = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), domain="shapes")
    states = ["red ball top left , lamp on .", "red ball upper left , lamp off ."]
    out = pipe(states=states, horizon=2, seed=0, render_context=2)
    assert len(out.context_frames) == 2
    strip = strip_of(out)
    tile = strip[:112, :128]
    assert tile.std() > 20  # the given state's tile holds its drawn frame (noise here), not a blank
    files = write_outputs(out, tmp_path)
    steps = json.loads(files.states.read_text())["steps"]
    assert steps[0]["changes"] == [] and steps[1]["changes"] == [
        "red ball moved from top left to upper left",
        "lamp switched off",
    ]
    assert steps[2]["changes"] == ["changed (not a world state)"]  # the stand-in predictor's words
    story = read_video(files.story)
    assert len(story.frames) == 4  # two drawn context states, then the two forecast ones
    assert files.versus is None  # no truth given


def test_context_then_forecast_marks_the_forecast_and_truth_sits_beside_it(tmp_path):
    out = WorldModelOutput(["a ."], ["b .", "c ."], [_square((0, 0, 255))], [_square(), _square()], 2.0)
    frames = story_frames(out, side=64)
    assert len(frames) == 3
    edge = frames[1][1, :, :]  # the forecast's first frame has a red border
    assert (edge[:, 0] > 150).mean() > 0.9 and (edge[:, 2] < 100).mean() > 0.9
    assert not ((frames[0][1, :, 0] > 150) & (frames[0][1, :, 2] < 100)).all()
    pairs = side_by_side(out.predicted_frames, [_square((0, 255, 0))] * 2, 1, side=64)
    assert len(pairs) == 2 and pairs[0].shape[1] == 2 * frames[1].shape[1]
    files = write_outputs(out, tmp_path, truth_frames=[_square((0, 255, 0))] * 2)
    assert len(read_video(files.versus).frames) == 2


def test_states_json_says_whether_each_predicted_state_parses_and_the_strip_says_no_change(tmp_path):
    from pipeline.outputs import PREDICTED_COLOUR, _tile
    from tests.fakes import WorldPredictor

    pipe = WorldModelPipeline(BrightnessCaptioner(), WorldPredictor(), NoiseRenderer(), domain="shapes")
    out = pipe(states=["red ball top left , lamp on .", "empty ."], horizon=2, render=False)
    assert out.observed_parses == [True, True] and out.predicted_parses == [False, False]
    steps = json.loads(write_outputs(out, tmp_path).states.read_text())["steps"]
    assert [s["parses"] for s in steps] == [True, True, False, False]
    assert steps[3]["changes"] == []  # "empty room ." twice: nothing changed
    plain = WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer())(
        states=["a ."], horizon=1
    )
    assert plain.observed_parses == [None] and plain.predicted_parses == [None]
    # a step where nothing changed says so in the strip (one more text line); the first step says nothing
    frame = _square()
    quiet, said = (_tile(frame, "a .", "t=1", 40, 64, PREDICTED_COLOUR, c).height for c in (None, []))
    assert said == quiet + 14

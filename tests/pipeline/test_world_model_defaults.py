"""WorldModelPipeline's defaults a new user relies on: the weights' state rate, the default weights folder, a
stage from its own folder, one device for every stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.loading import index_state_rate
from pipeline.utils import UserError
from pipeline.video import VideoLimits
from pipeline.world_model import WorldModelPipeline, sample_clip
from tests.fakes import BrightnessCaptioner, EchoPredictor, NoiseRenderer

ASSET = Path(__file__).resolve().parents[1] / "assets" / "bigbuckbunny_160x90.mp4"  # 16 frames at 6.25 fps


def _pipe(**kwargs) -> WorldModelPipeline:
    return WorldModelPipeline(BrightnessCaptioner(), EchoPredictor(), NoiseRenderer(), **kwargs)


def test_a_clip_is_read_at_the_default_state_rate_unless_the_call_says_otherwise():
    out = _pipe(default_state_rate=2.0)(ASSET, horizon=1, render=False)
    assert out.state_rate == 2.0 and out.source_indices == [0, 3, 6, 9, 12]  # 2.4 s at 2 Hz
    assert len(_pipe(default_state_rate=2.0)(ASSET, horizon=1, stride=4, render=False).observed_states) == 4
    assert len(_pipe()(ASSET, horizon=1, render=False).observed_states) == 16  # no default: every frame
    with pytest.raises(ValueError, match="default_state_rate must be > 0"):
        _pipe(default_state_rate=0.0)


def test_the_index_records_the_rate_and_a_bad_one_is_named():
    assert index_state_rate({"state_rate": 2}) == 2.0 and index_state_rate({}) is None
    with pytest.raises(UserError, match="state_rate must be a positive number .* got 'fast'"):
        index_state_rate({"state_rate": "fast"})
    shipped = json.loads((Path(__file__).resolve().parents[2] / "weights" / "model_index.json").read_text())
    assert shipped["state_rate"] == 2.0  # world.scenarios: FPS 10, STRIDE 5


def test_too_many_states_are_refused_by_a_reader_that_needs_no_model():
    with pytest.raises(UserError, match="more than 4 states at state rate 6 Hz"):
        sample_clip(ASSET, None, None, VideoLimits(max_frames=4), default_state_rate=6.0)


def test_from_pretrained_defaults_to_the_weights_env_and_loads_a_stage_from_its_own_folder(
    tiny_weights, tmp_path, monkeypatch
):
    from pipeline.predictor import Predictor

    index = json.loads((tiny_weights / "model_index.json").read_text())
    weights = tmp_path / "w"
    shutil.copytree(tiny_weights, weights, ignore=shutil.ignore_patterns("predictor"))
    (weights / "model_index.json").write_text(json.dumps({**index, "state_rate": 2.0}))
    own = tmp_path / "my-predictor"
    shutil.copytree(tiny_weights / "predictor", own)
    seen = []
    real = Predictor.from_pretrained.__func__

    def spy(
        cls, directory, device=None, **kwargs
    ):  # kwargs: the placement's dtype and compile, the projection
        seen.append((Path(directory), device))
        return real(cls, directory, device, **kwargs)

    monkeypatch.setattr(Predictor, "from_pretrained", classmethod(spy))
    monkeypatch.setenv("SEMWORLD_WEIGHTS_DIR", str(weights))
    with pytest.raises(UserError, match="missing folder for the predictor"):
        WorldModelPipeline.from_pretrained(device="cpu")
    pipe = WorldModelPipeline.from_pretrained(predictor=own, device="cpu")
    assert (
        seen == [(own, pipe.predictor.device)] and str(seen[0][1]) == "cpu"
    )  # the device reaches every stage
    assert pipe.default_state_rate == 2.0
    with pytest.raises(UserError, match="--renderer .*nowhere: no such directory"):
        WorldModelPipeline.from_pretrained(predictor=own, renderer=tmp_path / "nowhere")

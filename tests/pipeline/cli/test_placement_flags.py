"""`semworld predict` / `serve` placement flags: checked before any model loads (one line), then handed to the
pipeline (predict) or the service settings (serve, one uvicorn worker)."""

from __future__ import annotations

import pytest

from pipeline import cli
from tests.pipeline.cli.test_commands import _error


@pytest.fixture
def seen(monkeypatch):
    from pipeline.world_model import WorldModelPipeline

    got: dict = {}

    def load(weights_dir, **kwargs):
        got.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(WorldModelPipeline, "from_pretrained", staticmethod(load))
    return got


def test_bad_stage_options_are_one_line_before_models_load(states_file, tmp_path, capsys, seen):
    base = ["predict", "--states", str(states_file), "--out", str(tmp_path / "o")]
    err = _error(capsys, [*base, "--stage-device", "decoder=cpu"])
    assert err.startswith("semworld: error: --stage-device decoder=cpu: unknown stage 'decoder'")
    err = _error(capsys, [*base, "--stage-dtype", "predictor=int8"])
    assert "expected one of float32, bfloat16, float16" in err
    assert not seen  # nothing was loaded


def test_predict_hands_the_placement_to_the_pipeline(states_file, tmp_path, seen):
    argv = ["predict", "--states", str(states_file), "--out", str(tmp_path / "o"), "--dtype", "bfloat16",
            "--stage-dtype", "predictor=float32", "--stage-device", "renderer=cpu", "--compile"]  # fmt: skip
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert seen["dtype"] == "bfloat16" and seen["stage_dtypes"] == ["predictor=float32"]
    assert seen["stage_devices"] == ["renderer=cpu"] and seen["compile"] is True
    assert seen["project"] is True and seen["mirror"] is False
    seen.clear()
    with pytest.raises(SystemExit):
        cli.main([*argv, "--mirror", "--no-project"])
    assert seen["mirror"] is True and seen["project"] is False


def test_serve_hands_the_placement_to_the_settings(monkeypatch):
    import uvicorn

    import api.main

    got: dict = {}
    monkeypatch.setattr(api.main, "create_app", lambda settings: got.setdefault("settings", settings))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(kw))
    monkeypatch.setenv("SEMWORLD_PIPELINE_FACTORY", "tests.fakes:make_pipeline")
    assert cli.main(["serve", "--stage-dtype", "predictor=bf16", "--compile", "--dtype", "float16"]) == 0
    s = got["settings"]
    assert s.stage_dtypes == {"predictor": "bf16"} and s.compile and s.dtype == "float16"
    assert got["workers"] == 1  # one process owns the models and the GPU

"""A user's own models, end to end, without a word of the built-in world: tiny random real BLIP, 4-tensor and Stable
Diffusion stages whose model_index.json names no domain (so: free text), on a real clip, through `semworld
predict`, `semworld batch` and `POST /v1/predict`; and a stage that is no Hugging Face checkpoint, plugged in by
model_index.json, through the same three ways in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline import cli

REPO = Path(__file__).resolve().parents[2]
REAL_CLIP = REPO / "tests" / "assets" / "bigbuckbunny_160x90.mp4"
WORLD_WORDS = ("built-in world", "world state", "world grammar", "shapes")


def _no_world_words(text: str) -> None:
    assert not any(w in text for w in WORLD_WORDS), text


def _is_free_text(doc: dict) -> None:
    """What the free-text domain gives: no verdict on any state, a word-level timeline, no threshold (`doc` is a
    states.json document, with "steps", or an API response, with "changes" and "predicted_parses")."""
    assert doc["confidence_threshold"] is None
    if "steps" in doc:
        assert all(step["parses"] is None for step in doc["steps"])
        timeline = [step["changes"] for step in doc["steps"]]
    else:
        assert set(doc["observed_parses"]) | set(doc["predicted_parses"]) == {None}
        timeline = doc["changes"]
    changes = [c for step in timeline for c in step]
    assert all("not a world state" not in c for c in changes)
    assert any("->" in c or c.startswith(("added:", "removed:")) for c in changes)  # words, not "changed"
    _no_world_words(json.dumps(doc["warnings"]))


def test_predict_on_a_real_clip_speaks_free_text(tiny_weights, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["predict", str(REAL_CLIP), "--weights", str(tiny_weights), "--stride", "6", "--horizon", "3",
                     "--device", "cpu", "--out", str(out), "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["domain"] == "text" and summary["confidence_threshold"] is None
    assert summary["observed_parses"] == [None] * len(summary["observed_states"])
    assert summary["predicted_parses"] == [None] * 3 and summary["warnings"] == []
    doc = json.loads((out / "states.json").read_text())
    assert doc["steps"][0]["changes"] == [] and len(doc["steps"]) == len(summary["observed_states"]) + 3
    _is_free_text(doc)
    _no_world_words(captured.err)
    # the text report marks nothing as "not a ... state": there is no grammar to be outside of
    assert cli.main(["predict", str(REAL_CLIP), "--weights", str(tiny_weights), "--stride", "6", "--horizon", "2",
                     "--device", "cpu", "--out", str(tmp_path / "o2")]) == 0  # fmt: skip
    text = capsys.readouterr()
    assert "predicted 2 states:" in text.out and "? " not in text.out.split("predicted 2 states:")[1]
    _no_world_words(text.out + text.err)


def test_states_in_words_are_checked_against_the_predictors_vocabulary(tiny_weights, tmp_path, capsys):
    states = tmp_path / "s.txt"
    states.write_text("red ball top left .\nred zebra top left .\n")  # world words are just words here
    code = cli.main(
        ["predict", "--states", str(states), "--weights", str(tiny_weights), "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2 and "unknown word 'zebra'" in err and "not in the predictor's vocabulary" in err
    # a state the world grammar would refuse (two objects in one cell) is fine as free text
    states.write_text("red ball top left , blue box top left .\n")
    assert cli.main(["predict", "--states", str(states), "--weights", str(tiny_weights), "--horizon", "1",
                     "--device", "cpu", "--out", str(tmp_path / "o")]) == 0  # fmt: skip


def test_batch_over_a_folder_speaks_free_text(tiny_weights, tmp_path, capsys):
    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(REAL_CLIP, videos / "a.mp4")
    shutil.copy(REAL_CLIP, videos / "b.mp4")
    out = tmp_path / "out"
    code = cli.main(["batch", str(videos), "--out", str(out), "--weights", str(tiny_weights), "--stride", "6",
                     "--horizon", "2", "--device", "cpu", "--no-progress"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    for name in ("a", "b"):
        doc = json.loads((out / name / "states.json").read_text())
        _is_free_text(doc)
    _no_world_words(captured.out + captured.err)


def test_post_predict_speaks_free_text(tiny_weights, tmp_path):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from api.settings import Settings
    from tests.api.conftest import wait_ready

    app = create_app(Settings(data_dir=tmp_path, weights_dir=tiny_weights, device="cpu"))
    with TestClient(app) as client:
        wait_ready(client, timeout=120)
        r = client.post("/v1/predict", files={"file": ("clip.mp4", REAL_CLIP.read_bytes(), "video/mp4")},
                        data={"horizon": "2", "stride": "8"})  # fmt: skip
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["domain"] == "text" and body["predicted_parses"] == [None, None]
        _is_free_text(body)
        assert client.get("/v1/samples").json() == []  # free text has no sample clips of its own


@pytest.fixture()
def plugin_weights(tiny_weights, tmp_path) -> Path:
    """tiny_weights, its captioner swapped for a plug-in stage (no Hugging Face checkpoint), in the toy domain."""
    from pipeline.domain import register_domain
    from tests.fakes import ToyDomain

    register_domain("toy", ToyDomain)
    weights = tmp_path / "plugin"
    weights.mkdir()
    index = {
        "domain": "toy",
        "captioner": ["tests.fakes", "make_flip_stage"],
        "predictor": ["tests.fakes", "make_flip_stage"],
        "renderer": ["tests.fakes", "make_flip_stage"],
    }
    (weights / "model_index.json").write_text(json.dumps(index))
    return weights


def test_a_plug_in_stage_serves_predict_batch_and_the_api(plugin_weights, tmp_path, capsys):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from api.settings import Settings
    from tests.api.conftest import wait_ready

    out = tmp_path / "p"
    assert cli.main(["predict", str(REAL_CLIP), "--weights", str(plugin_weights), "--stride", "8", "--horizon", "2",
                     "--device", "cpu", "--out", str(out), "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert summary["domain"] == "toy" and set(summary["observed_states"]) <= {"up", "down"}
    assert summary["predicted_parses"] == [True, True] and summary["changes"][-1] == ["flip"]

    videos = tmp_path / "videos"
    videos.mkdir()
    shutil.copy(REAL_CLIP, videos / "a.mp4")
    assert cli.main(["batch", str(videos), "--out", str(tmp_path / "b"), "--weights", str(plugin_weights),
                     "--stride", "8", "--horizon", "2", "--device", "cpu", "--no-progress"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "b" / "a" / "states.json").read_text())["steps"][-1]["changes"] == ["flip"]

    app = create_app(Settings(data_dir=tmp_path / "api", weights_dir=plugin_weights, device="cpu"))
    with TestClient(app) as client:
        wait_ready(client, timeout=60)
        r = client.post("/v1/rollout", json={"states": ["up"], "horizon": 2, "render": False})
        assert r.status_code == 200, r.text
        assert r.json()["predicted_states"] == ["down", "up"] and r.json()["domain"] == "toy"
        bad = client.post("/v1/rollout", json={"states": ["sideways"], "horizon": 1, "render": False})
        assert bad.status_code == 422 and "'sideways' is not up or down" in bad.text


def test_a_plug_in_that_cannot_be_imported_is_one_line(plugin_weights, tmp_path, capsys):
    index = json.loads((plugin_weights / "model_index.json").read_text())
    index["captioner"] = ["no_such_package.stages", "make"]
    (plugin_weights / "model_index.json").write_text(json.dumps(index))
    code = cli.main(["predict", str(REAL_CLIP), "--weights", str(plugin_weights), "--stride", "8", "--device", "cpu",
                     "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and "the captioner is no_such_package.stages.make, but no_such_package.stages cannot be imported"
        in err
    )
    assert "\n" not in err

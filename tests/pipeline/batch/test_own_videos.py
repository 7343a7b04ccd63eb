"""The "bring your own videos" loop of docs/batch.md, end to end on tiny random real models: caption a folder of
videos into a states corpus with whatever captioner a weights folder names, train a predictor on that corpus, then
batch and serve with that predictor and a local Stable Diffusion-layout renderer."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline import cli


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> Path:
    from tests.fakes import build_tiny_weights

    try:
        return build_tiny_weights(tmp_path_factory.getbasetemp() / "semworld-tiny-weights")
    except ImportError as err:
        pytest.skip(f"a stage module is not there yet: {err}")


def index(folder: Path, **stages: Path) -> Path:
    """A weights folder whose model_index.json names stage folders anywhere on disk."""
    folder.mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({k: str(v) for k, v in stages.items()}))
    return folder


def test_caption_train_then_batch_and_serve_with_your_models(
    tiny_weights, world_clips, tmp_path, monkeypatch
):
    monkeypatch.delenv("SEMWORLD_PIPELINE_FACTORY", raising=False)
    clips = world_clips / "clips"
    # 1. Only a captioner: a local BLIP folder (here the tiny one) named by an index with nothing else in it.
    captioner_only = index(tmp_path / "w-caption", captioner=tiny_weights / "captioner")
    corpus = tmp_path / "corpus"
    argv = [
        "batch",
        str(clips),
        "--out",
        str(corpus),
        "--stages",
        "caption",
        "--weights",
        str(captioner_only),
    ]
    assert cli.main([*argv, "--stride", "2", "--device", "cpu", "--no-progress"]) == 0
    lines = [json.loads(s) for s in (corpus / "states.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(len(r["states"]) == 16 and r["predicted"] == [] for r in lines)

    # 2. The corpus is the trainer's --data as it is.
    predictor = tmp_path / "my-predictor"
    assert (
        cli.main(
            [
                "train",
                "predictor",
                "--data",
                str(corpus / "states.jsonl"),
                "--preset",
                "tiny",
                "--out",
                str(predictor),
                "--epochs",
                "1",
                "--batch-size",
                "8",
                "--val-fraction",
                "0.25",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )  # fmt: skip
        == 0
    )
    assert (predictor / "tokenizer.json").is_file()

    # 3. Your predictor with the captioner and a local Stable Diffusion-layout renderer: batch...
    mine = index(
        tmp_path / "w-mine",
        captioner=tiny_weights / "captioner",
        predictor=predictor,
        renderer=tiny_weights / "renderer",
    )
    out = tmp_path / "out"
    argv = ["batch", str(clips), "--out", str(out), "--weights", str(mine), "-k", "2", "--stride", "4"]
    assert cli.main([*argv, "--device", "cpu", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"ok": 4, "skipped": 0, "failed": 0}
    frame = np.asarray(Image.open(out / "000000" / "predicted_001.png"))
    assert frame.shape == (32, 32, 3)

    # ... and serve (the API loads the same weights folder; a what-if from the predicted states of a clip: the
    # random captioner's own captions run past the tiny predictor's 8 token slots, which the API refuses).
    predicted = json.loads((out / "states.jsonl").read_text().splitlines()[0])["predicted"]
    from fastapi.testclient import TestClient

    from api.main import create_app
    from api.settings import Settings
    from tests.api.conftest import wait_ready

    app = create_app(
        Settings(data_dir=tmp_path / "data", weights_dir=mine, samples_dir=tmp_path, device="cpu")
    )
    with TestClient(app) as client:
        wait_ready(client, timeout=120)
        r = client.post("/v1/rollout", json={"states": predicted, "horizon": 2, "seed": 0})
        assert r.status_code == 200, r.text
        frames = r.json()["frames"]
        assert len(frames) == 2
        png = frames[0].split(",", 1)[-1]
        assert np.asarray(Image.open(io.BytesIO(base64.b64decode(png)))).shape == (32, 32, 3)

"""The renderer's trainer: argument checks, and a tiny run that checkpoints, resumes and saves a loadable renderer."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.renderer import Renderer
from pipeline.training.args import TrainRendererArgs
from pipeline.training.renderer import train_renderer
from tests.pipeline.test_renderer import tiny_args


def test_args_are_validated():
    with pytest.raises(ValueError, match="prediction_type must be sample, epsilon or v_prediction, got 'x'"):
        TrainRendererArgs(out="o", prediction_type="x")
    with pytest.raises(ValueError, match="image_size must be >= 32 and divisible"):
        TrainRendererArgs(out="o", image_size=34, vae_channels=(8, 16, 16))


def test_training_runs_checkpoints_resumes_and_saves_a_loadable_renderer(tmp_path):
    out = tmp_path / "run"
    args = tiny_args(out, vae_steps=2, unet_steps=2, vae_batch=2, unet_batch=2, pool=8, eval_every=2,
                     eval_states=2, checkpoint_every=1)  # fmt: skip
    train_renderer(args)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in log if r.get("final")] == ["vae"] and log[-1]["stage"] == "done"
    assert (out / "strips" / "unet_000002.png").is_file() and (out / "checkpoint.pt").is_file()
    assert torch.load(out / "checkpoint.pt", weights_only=False)["stage"] == "done"

    # Resuming with a larger budget continues from the saved step instead of starting over.
    train_renderer(tiny_args(out, vae_steps=2, unet_steps=3, vae_batch=2, unet_batch=2, pool=8, eval_every=2,
                             eval_states=2, checkpoint_every=1))  # fmt: skip
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["stage"] == "done" and ckpt["step"] == 3
    steps = [
        r["step"]
        for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())
        if r["stage"] == "unet"
    ]
    assert steps == [2, 2, 3]  # eval at 2, final eval at 2, then the resumed run's final eval at 3

    renderer = Renderer.from_pretrained(out / "pipeline", device="cpu")
    assert renderer.size == (48, 48) and renderer.settings.steps == 2
    assert json.loads((out / "pipeline" / "metrics.json").read_text())["psnr"] > 0



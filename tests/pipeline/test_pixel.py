"""PixelPredictor: frames in, frames out at the input's size, loaded from a model or a run folder."""

import numpy as np
import pytest
import torch

from models.pixel import PixelConfig, PixelModel
from pipeline.pixel import PixelPredictor

TINY = PixelConfig(image_size=32, hid_s=4, hid_t=8, translator_blocks=1, kernel=3)


def test_predict_frames_at_the_input_size_from_a_run_folder(tmp_path):
    torch.manual_seed(0)
    model = PixelModel(TINY)
    torch.nn.init.zeros_(model.decoder.head.weight)  # residual model with a zero head: copies the last frame
    torch.nn.init.zeros_(model.decoder.head.bias)
    model.save_pretrained(tmp_path / "model")
    pred = PixelPredictor.from_pretrained(tmp_path)  # the run folder: its model/ is found
    flat = [np.full((128, 128, 3), v, np.uint8) for v in (10, 20, 30, 40, 200)]
    out = pred.predict_frames([flat], 3)
    assert len(out) == 1 and len(out[0]) == 3
    assert all(f.shape == (128, 128, 3) and f.dtype == np.uint8 for f in out[0])
    assert all(int(f.min()) == int(f.max()) == 200 for f in out[0])  # the last of the frames it read


def test_short_context_is_a_clear_error(tmp_path):
    PixelModel(TINY).save_pretrained(tmp_path)
    pred = PixelPredictor.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"contexts\[0\] has 2 frames; the pixel model reads 4"):
        pred.predict_frames([[np.zeros((64, 64, 3), np.uint8)] * 2], 1)


def test_the_shipped_pixel_model_beats_copy_last_one_step_ahead():
    # weights/pixel (docs/semantic_vs_pixel.md) on fresh physics clips: its next frame is nearer the truth than
    # repeating the last context frame is.
    from pathlib import Path

    import world

    pred = PixelPredictor.from_pretrained(Path(__file__).resolve().parents[2] / "weights" / "pixel")
    records = world.sequences("physics", 8, seed=7, length=5, split="test")
    frames = [[world.render_state(s) for s in r["states"]] for r in records]  # 5 frames of (128, 128, 3) each
    out = pred.predict_frames([f[:4] for f in frames], 1)
    err = lambda a, b: float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))  # noqa: E731
    model = np.mean([err(o[0], f[4]) for o, f in zip(out, frames)])
    copy = np.mean([err(f[3], f[4]) for f in frames])
    assert model < 0.5 * copy

"""The SimVP-style pixel predictor: shapes, validation, rollout semantics and the save/load round trip."""

import json

import pytest
import torch

from models.pixel import PixelConfig, PixelModel, resize_frames

TINY = PixelConfig(context=3, image_size=16, hid_s=4, hid_t=8, downsample=1, translator_blocks=1, kernel=3)


def test_forward_and_rollout_shapes_and_range():
    torch.manual_seed(0)
    model = PixelModel(TINY).eval()
    frames = torch.rand(2, 3, 3, 16, 16)  # (B, T, C, S, S)
    nxt = model(frames)
    assert nxt.shape == (2, 3, 16, 16)
    out = model.rollout(frames, 5)
    assert out.shape == (2, 5, 3, 16, 16)
    assert out.min() >= 0 and out.max() <= 1
    torch.testing.assert_close(out[:, 0], nxt)


def test_rollout_feeds_its_own_frames_back():
    """Step 2 of a rollout equals a forward pass on (context[1:], step 1): autoregressive, not teacher-forced."""
    torch.manual_seed(1)
    model = PixelModel(TINY).eval()
    frames = torch.rand(1, 3, 3, 16, 16)
    out = model.rollout(frames, 2)
    window = torch.cat([frames[:, 1:], out[:, :1]], dim=1)
    torch.testing.assert_close(out[:, 1], model(window))


def test_residual_model_with_zero_head_copies_the_last_frame():
    model = PixelModel(TINY)
    torch.nn.init.zeros_(model.decoder.head.weight)
    torch.nn.init.zeros_(model.decoder.head.bias)
    frames = torch.rand(2, 3, 3, 16, 16)
    torch.testing.assert_close(model(frames), frames[:, -1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image_size": 18, "downsample": 2}, "image_size"),
        ({"kernel": 4}, "kernel"),
        ({"context": 0}, "context"),
    ],
)
def test_config_names_the_bad_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PixelConfig(**kwargs)


def test_wrong_frames_shape_and_k_are_clear_errors():
    model = PixelModel(TINY)
    with pytest.raises(ValueError, match=r"frames must be \(B, 3, 3, 16, 16\)"):
        model(torch.rand(1, 4, 3, 16, 16))
    with pytest.raises(ValueError, match="k must be"):
        model.rollout(torch.rand(1, 3, 3, 16, 16), 0)


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(2)
    model = PixelModel(TINY).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["semworld_model"] == "pixel_simvp" and config["hid_t"] == 8
    loaded = PixelModel.from_pretrained(tmp_path).eval()
    assert loaded.config == TINY
    frames = torch.rand(1, 3, 3, 16, 16)
    torch.testing.assert_close(loaded.rollout(frames, 3), model.rollout(frames, 3))


def test_loading_another_kind_is_refused(tmp_path):
    PixelModel(TINY).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "semworld_model": "four_tensor"}))
    with pytest.raises(ValueError, match="not 'pixel_simvp'"):
        PixelModel.from_pretrained(tmp_path)


def test_resize_frames_keeps_leading_dims_and_constants():
    x = torch.full((2, 4, 3, 32, 32), 0.25)
    y = resize_frames(x, 16)
    assert y.shape == (2, 4, 3, 16, 16)
    torch.testing.assert_close(y, torch.full_like(y, 0.25))
    assert resize_frames(x, 32) is x

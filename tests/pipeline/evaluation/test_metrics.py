"""The one copy of each metric: PSNR, SSIM, the layout and shape checks and exact match tell right from wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.evaluation.metrics import evaluate_frames, exact_match, layout_check, psnr, shape_check, ssim


def test_metrics_tell_right_frames_from_wrong_ones():
    import world

    states = ["red ball top left , blue box bottom right .", "green diamond middle center , lamp on .",
              "orange triangle upper midleft , screen , lamp off ."]  # fmt: skip
    truth = [world.render_state(s, size=64) for s in states]
    assert psnr(truth[0], truth[0]) == float("inf") and ssim(truth[0], truth[0]) == pytest.approx(1.0)
    assert layout_check(states[0], truth[0]) == (2, 2, True)
    assert shape_check(states[0], truth[0]) == [True, True]
    right = evaluate_frames(states, truth)
    assert right["layout_acc"] == 1.0 and right["object_cell_acc"] == 1.0
    moved = [world.render_state(s, size=64) for s in
             ["red ball top midleft , blue box bottom right .", "green diamond middle center , lamp off .",
              "orange triangle upper midleft , screen , lamp off ."]]  # fmt: skip
    wrong = evaluate_frames(states, moved)
    assert wrong["layout_acc"] == pytest.approx(1 / 3)  # a moved ball and an unlit lamp are caught
    assert wrong["object_cell_acc"] == pytest.approx(3 / 4)
    assert wrong["psnr"] < 30 and wrong["ssim"] < 1.0
    assert right["object_shape_acc"] == 1.0 and right["frame_acc"] == 1.0
    reshaped = [world.render_state(s, size=64) for s in
                ["red box top left , blue box bottom right .", states[1], states[2]]]  # fmt: skip
    shapes = evaluate_frames(states, reshaped)
    assert shapes["layout_acc"] == 1.0  # colours and cells are right...
    assert shapes["object_shape_acc"] == pytest.approx(3 / 4) and shapes["frame_acc"] == pytest.approx(2 / 3)


def test_round_trip_by_object_count():
    """With a captioner, the round trip is scored overall and, on request, for each object count apart."""
    import world

    states = ["empty .", "red ball top left .", "red ball top left , blue box bottom right .",
              "red ball top left , green diamond middle center , blue box bottom right ."]  # fmt: skip
    frames = [world.render_state(s, size=64) for s in states]

    class Reader:  # reads every frame right but the 3-object one, whose box it takes for a ball
        def caption(self, images):
            assert len(images) == len(states)
            return [*states[:3], states[3].replace("blue box", "blue ball")]

    plain = evaluate_frames(states, frames, Reader())
    assert plain["roundtrip_acc"] == pytest.approx(3 / 4) and not any("objects=" in k for k in plain)
    split = evaluate_frames(states, frames, Reader(), by_objects=True)
    assert {k: v for k, v in split.items() if "objects=" in k} == {
        "roundtrip_acc[objects=0]": 1.0, "roundtrip_acc[objects=1]": 1.0,
        "roundtrip_acc[objects=2]": 1.0, "roundtrip_acc[objects=3]": 0.0}  # fmt: skip


def test_ssim_is_the_gaussian_one():
    """torchmetrics' Gaussian SSIM: 1 for equal images, below 1 for noise, below 0 for an inverted image, and it
    weighs a pixel's neighbours by distance (a uniform window would score these two edits alike)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
    assert ssim(a, a) == pytest.approx(1.0)
    noisy = np.clip(a.astype(int) + rng.normal(0, 20, a.shape), 0, 255).astype(np.uint8)
    assert 0.0 < ssim(a, noisy) < 1.0
    assert ssim(a, 255 - a) < 0.0
    flat = np.full((32, 32, 3), 128, np.uint8)
    dot = flat.copy()
    dot[16, 16] = 255
    ring = flat.copy()
    ring[13, 13:20] = ring[19, 13:20] = 255
    assert ssim(flat, dot) > ssim(flat, ring)


def test_exact_match_counts_by_number_of_objects():
    truth = ["red ball top left .", "empty .", "red ball top left , blue box bottom right ."]
    got = ["red ball top left .", "lamp on .", "red ball top left , blue box bottom right ."]
    assert exact_match(got, truth) == {"exact_match": pytest.approx(2 / 3), "objects=0": 0.0, "objects=1": 1.0,
                                       "objects=2": 1.0}  # fmt: skip


def test_ssim_agrees_with_torchmetrics():
    """The separable window gives torchmetrics' Gaussian SSIM (same settings) to float64 rounding, pair by pair,
    on odd sizes and on near-equal screens alike."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (3, 37, 29, 3)).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.normal(0, 30, a.shape), 0, 255).astype(np.uint8)
    b[2] = a[2]
    b[2, 10:14, 5:7] = 255  # one small object moved in
    to_torch = lambda x: torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2)  # noqa: E731
    theirs = structural_similarity_index_measure(
        to_torch(a), to_torch(b), gaussian_kernel=True, sigma=1.5, kernel_size=11, data_range=255.0,
        k1=0.01, k2=0.03, reduction="none",
    )  # fmt: skip
    ours = np.array([ssim(x, y) for x, y in zip(a, b)])
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="different shapes"):
        ssim(a[0], b[0, :-1])


def test_ssim_of_read_only_frames_warns_nothing():
    """Frames decoded from video are often read-only arrays; SSIM takes them silently and scores them the same."""
    import warnings

    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (20, 24, 3)).astype(np.uint8)
    b = rng.integers(0, 256, (20, 24, 3)).astype(np.uint8)
    expected = ssim(a, b)
    a.flags.writeable = False
    b.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ssim(a, b) == expected

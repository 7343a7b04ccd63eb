"""`semworld train pixel`: the trainer's files, its resume after a stop, and the loss it minimises."""

import json

import pytest
import torch

from models.pixel import PixelConfig, PixelModel
from pipeline.training.image_args import TrainPixelArgs
from pipeline.training.pixel import rollout_loss, sample_batch, train_pixel
from pipeline.utils import UserError

TINY = PixelConfig(image_size=32, hid_s=4, hid_t=8, downsample=2, translator_blocks=1, kernel=3)


def tiny_args(out, **kw) -> TrainPixelArgs:
    base = dict(out=str(out), clips=6, steps=4, batch_size=2, warmup_steps=1, eval_every=2, eval_clips=2,
                checkpoint_every=1, progress=False, model=TINY)  # fmt: skip
    return TrainPixelArgs(**{**base, **kw})


def test_train_writes_weights_log_curve_and_summary(tmp_path):
    summary = train_pixel(tiny_args(tmp_path))
    assert summary["steps_done"] == 4 and summary["stopped_by"] == "steps"
    assert summary["parameters"] == sum(p.numel() for p in PixelModel(TINY).parameters())
    assert summary["cpu_seconds_total"] > 0
    assert len(summary["eval"]["mse_by_horizon"]) == 8
    for name in ("checkpoint.pt", "log.jsonl", "loss_curve.png", "training_summary.json"):
        assert (tmp_path / name).is_file(), name
    assert json.loads((tmp_path / "training_summary.json").read_text())["steps_done"] == 4
    loaded = PixelModel.from_pretrained(tmp_path / "model")
    assert loaded.config == TINY
    evals = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if "eval" in r] == [2, 4]


def test_a_stopped_run_resumes_to_the_same_weights(tmp_path):
    train_pixel(tiny_args(tmp_path / "whole"))
    train_pixel(tiny_args(tmp_path / "split", steps=2))  # as if killed after step 2
    resumed = train_pixel(tiny_args(tmp_path / "split"))
    assert resumed["steps_done"] == 4
    a = PixelModel.from_pretrained(tmp_path / "whole" / "model").state_dict()
    b = PixelModel.from_pretrained(tmp_path / "split" / "model").state_dict()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_resume_with_another_model_shape_is_refused(tmp_path):
    train_pixel(tiny_args(tmp_path, steps=1))
    other = PixelConfig(image_size=32, hid_s=8, hid_t=8, downsample=2, translator_blocks=1, kernel=3)
    with pytest.raises(ValueError, match="differs from --model flags"):
        train_pixel(tiny_args(tmp_path, model=other))


def test_batches_are_consecutive_world_frames():
    import world
    from pipeline.training.pixel import frames_tensor

    clips = [["red ball top left .", "red ball upper left .", "red ball middle left ."]]
    batch = sample_batch(clips, 2, 3, 32, torch.Generator().manual_seed(0))  # (B, 3, C, 32, 32)
    assert batch.shape == (2, 3, 3, 32, 32)
    torch.testing.assert_close(batch[0], frames_tensor(clips[0], 32))
    assert world.render_state(clips[0][0]).shape == (128, 128, 3)


def test_loss_is_zero_on_the_truth_and_grows_with_error():
    x = torch.rand(2, 2, 3, 16, 16)
    assert float(rollout_loss(x, x, 10.0)) == 0.0
    assert float(rollout_loss((x + 0.2).clamp(0, 1), x, 10.0)) < float(
        rollout_loss((x + 0.4).clamp(0, 1), x, 10.0)
    )


def test_arguments_name_the_bad_flag(tmp_path):
    with pytest.raises(UserError, match="--length 5 is shorter"):
        tiny_args(tmp_path, length=5)
    with pytest.raises(UserError, match="--batch-size"):
        tiny_args(tmp_path, batch_size=0)


@pytest.mark.integration
def test_a_game_pixel_model_learns_from_recorded_clips_under_their_actions(tmp_path):
    """`semworld train pixel --domain pong`: the clips are recorded once, the model takes the game's action
    words, and each training window's actions are the ones taken after the frames that end its context."""
    pytest.importorskip("ale_py")
    from pipeline.domain import get_domain
    from pipeline.pixel import PixelPredictor
    from pipeline.training.pixel import RecordedClips
    from pipeline.training.recorded_frames import record_frames

    summary = train_pixel(tiny_args(tmp_path / "run", domain="pong", clips=2, length=12, eval_clips=1))
    pong = get_domain("pong")
    assert summary["domain"] == "pong" and tuple(summary["config"]["actions"]) == pong.actions
    data = record_frames(pong, tmp_path / "run" / "data-train", clips=2, length=12, seed=0, split="train")
    clips = RecordedClips(data, 32, pong.actions)
    # context 4: frames 3..6, then the actions after frames 6 and 7
    frames, actions = clips.windows([3], window=6, k=2)
    assert frames.shape == (1, 6, 3, 32, 32)
    assert [pong.actions[i] for i in actions[0].tolist()] == data.actions[6:8]
    assert torch.equal(frames[0, 0].mul(255).round().to(torch.uint8), clips.frames[3])
    predictor = PixelPredictor.from_pretrained(tmp_path / "run")
    screens = list(data.frames[:4])
    up, down = (predictor.predict_frames([screens], 2, [[word] * 2])[0] for word in ("up", "down"))
    assert up[0].shape == (210, 160, 3)  # the screen's own size back
    with pytest.raises(ValueError, match="'left' is not one of"):
        predictor.predict_frames([screens], 1, [["left"]])
    with pytest.raises(ValueError, match="2 action words for each"):
        predictor.predict_frames([screens], 2)


def test_recorded_windows_stay_inside_clips_that_hold_them():
    """An episode that ends early records a short clip: windows are drawn only from clips that hold a whole
    window (never across the frames of two clips), and a recording with none says so."""
    import numpy as np

    from pipeline.training.pixel import RecordedClips
    from pipeline.training.recorded_frames import RecordedFrames

    lengths = [3, 10, 2]  # frame k of clip c is filled with the value 10 * c + k
    frames = np.concatenate(
        [np.full((n, 8, 8, 3), 10 * c, np.uint8) + np.arange(n, dtype=np.uint8)[:, None, None, None]
         for c, n in enumerate(lengths)]
    )  # fmt: skip
    starts = [0, 3, 13]
    data = RecordedFrames(frames, ["s"] * len(frames), ["up"] * len(frames), starts)
    clips = RecordedClips(data, 8, ("up", "down"))
    assert [len(c) for c in clips.long_clips(6)] == [10]
    batch, _ = clips.batch(16, 6, 2, torch.Generator().manual_seed(0))  # (B, 6, C, 8, 8)
    firsts = batch[:, :, 0, 0, 0].mul(255).round().long()  # (B, 6): each window's frame values
    assert bool(((firsts >= 10) & (firsts < 20)).all())  # all from clip 1
    assert bool((firsts.diff(dim=1) == 1).all())  # consecutive frames of one clip
    with pytest.raises(UserError, match="no recorded clip holds 11 frames"):
        clips.batch(1, 11, 2, torch.Generator())

"""The captioner's trainer: the scene sampler, augmentations, attention targets, flags and a tiny resumable run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.captioner import Captioner
from pipeline.utils import UserError
from tests.pipeline.test_captioner import _frames


def test_sample_scene_is_valid_and_fits_n_tokens():
    from pipeline.training.captioner import sample_scene
    from world import MAX_TOKENS, caption, parse_state, tokenize

    rng = np.random.default_rng(0)
    counts = set()
    for _ in range(300):
        scene = sample_scene(rng, (1, 1, 1, 1))
        text = caption(scene)
        assert len(tokenize(text)) <= MAX_TOKENS and parse_state(text) == scene
        counts.add(len(scene.objects))
    assert counts == {0, 1, 2, 3}


def test_train_captioner_tiny_run_resumes_and_loads(tmp_path):
    import json as _json

    from models.captioner import CaptionerConfig
    from pipeline.training.captioner import train_captioner
    from pipeline.training.image_args import TrainCaptionerArgs

    # a 5 x 5 ViT grid (40 / 8), one patch per world cell, so the attention-supervised path runs too
    model = CaptionerConfig(image_size=40, patch_size=8, vision_layers=1, text_layers=1, hidden=32, heads=2)
    args = TrainCaptionerArgs(out=str(tmp_path / "model"), run_dir=str(tmp_path / "run"), epochs=1, steps_per_epoch=2,
                              batch_size=4, eval_frames=8, warmup_steps=1, test_clips=1, model=model)  # fmt: skip
    best = train_captioner(args)
    assert 0.0 <= best["exact_match"] <= 1.0 and best["epoch"] == 1
    assert best["test_frames"] == 12 and 0.0 <= best["test_exact_match"] <= 1.0
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
    # a second run with more epochs resumes after epoch 1 instead of starting again
    args.epochs = 2
    train_captioner(args)
    records = [_json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["event"] == "epoch"] == [1, 2]
    assert sum(r["event"] == "start" for r in records) == 1
    captioner = Captioner.from_pretrained(tmp_path / "model", device="cpu")
    assert len(captioner.caption(_frames(2))) == 2
    assert not (tmp_path / "model" / "checkpoint.pt").exists()  # the HF folder holds the model only
    # the same run folder under arguments of another run is refused by name, and the checkpoint is kept
    args.epochs, args.lr = 3, 1e-4
    with pytest.raises(UserError, match=r"different captioner run \(lr 0.0015 -> 0.0001\)"):
        train_captioner(args)
    args.lr, args.seed = 1.5e-3, 1
    with pytest.raises(UserError, match=r"seed 0 -> 1"):
        train_captioner(args)
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["epoch"] == 1


def test_init_from_continues_from_a_saved_captioner(tmp_path, capfd):
    from models.captioner import CaptionerConfig
    from pipeline.training.captioner import train_captioner
    from pipeline.training.image_args import TrainCaptionerArgs

    model = CaptionerConfig(image_size=40, patch_size=8, vision_layers=1, text_layers=1, hidden=32, heads=2)
    common = dict(
        epochs=1, steps_per_epoch=1, batch_size=2, eval_frames=4, warmup_steps=1, test_clips=0, model=model
    )
    train_captioner(TrainCaptionerArgs(out=str(tmp_path / "a"), run_dir=str(tmp_path / "ra"), **common))
    assert "Writing model shards" not in capfd.readouterr().err  # saves draw no bar of the libraries'
    before = Captioner.from_pretrained(tmp_path / "a", device="cpu").caption(_frames(2))
    # lr ~ 0: the fine-tuned model is the one it started from, so it captions the same
    train_captioner(
        TrainCaptionerArgs(
            out=str(tmp_path / "b"),
            run_dir=str(tmp_path / "rb"),
            init_from=str(tmp_path / "a"),
            lr=1e-12,
            jitter_prob=1.0,
            resize_prob=1.0,
            augment_from=0,
            **common,
        )
    )
    assert Captioner.from_pretrained(tmp_path / "b", device="cpu").caption(_frames(2)) == before
    with pytest.raises(UserError, match="no model.safetensors"):
        train_captioner(
            TrainCaptionerArgs(
                out=str(tmp_path / "c"), run_dir=str(tmp_path / "rc"), init_from=str(tmp_path), **common
            )
        )


def test_jitter_and_resize_keep_the_states():
    from pipeline.training.captioner import make_examples

    plain_frames, plain_states = make_examples(np.random.default_rng(3), 6, (0, 0, 0, 1))
    frames, states = make_examples(
        np.random.default_rng(3), 6, (0, 0, 0, 1), jitter_prob=1.0, resize_prob=1.0
    )
    assert states[0] == plain_states[0]  # the scene is drawn first: same scene, moved and re-rasterised
    assert all(f.shape == (128, 128, 3) and f.dtype == np.uint8 for f in frames)
    assert plain_frames[0].shape == frames[0].shape and not np.array_equal(plain_frames[0], frames[0])


def test_attention_targets_point_at_each_objects_cell():
    from pipeline.training.captioner import attention_targets

    targets = attention_targets(["red ball top left , blue box bottom right , lamp on .", "empty ."], 16, 5)
    assert targets.shape == (2, 16)
    # [BOS]/',' and the colour, shape and row words of object k look at its cell: 1 + row * 5 + col
    assert targets[0, :10].tolist() == [1, 1, 1, 1, -1, 25, 25, 25, 25, -1]
    assert (targets[0, 10:] == -1).all() and (targets[1] == -1).all()


def test_cli_flags_map_onto_the_args_dataclass():
    from pipeline.cli import build_parser
    from pipeline.cli.flags import dataclass_from_namespace
    from pipeline.training.image_args import TrainCaptionerArgs

    ns = build_parser().parse_args(
        [
            "train",
            "captioner",
            "--out",
            "w/captioner",
            "--epochs",
            "3",
            "--attn-weight",
            "0",
            "--count-weights",
            "1",
            "1",
            "2",
            "4",
            "--hidden",
            "64",
        ]
    )
    args = dataclass_from_namespace(TrainCaptionerArgs, ns)
    assert callable(ns.func)
    assert (args.out, args.epochs, args.attn_weight, args.model.hidden) == ("w/captioner", 3, 0.0, 64)
    assert args.count_weights == (1.0, 1.0, 2.0, 4.0)
    defaults = TrainCaptionerArgs(out="w/captioner")
    assert args.batch_size == defaults.batch_size and args.augment_from == defaults.augment_from


def test_train_args_validate():
    from models.captioner import CaptionerConfig
    from pipeline.training.image_args import TrainCaptionerArgs

    with pytest.raises(ValueError, match="epochs"):
        TrainCaptionerArgs(out="x", epochs=0)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        CaptionerConfig(image_size=80, patch_size=12)

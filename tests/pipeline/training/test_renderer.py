"""The renderer's trainer: argument checks, and a tiny run that checkpoints, resumes and saves a loadable renderer."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.renderer import Renderer
from pipeline.training.image_args import TrainRendererArgs
from pipeline.training.renderer import train_renderer
from pipeline.training.renderer_parts import validation_states, varied_states
from tests.pipeline.test_renderer import tiny_args


def test_args_are_validated():
    with pytest.raises(ValueError, match="prediction_type must be sample, epsilon or v_prediction, got 'x'"):
        TrainRendererArgs(out="o", prediction_type="x")
    with pytest.raises(ValueError, match="image_size must be >= 32 and divisible"):
        TrainRendererArgs(out="o", image_size=34, vae_channels=(8, 16, 16))
    with pytest.raises(ValueError, match="eval_set must be 'test' or 'varied', got 'hard'"):
        TrainRendererArgs(out="o", eval_set="hard")
    with pytest.raises(ValueError, match="vae_object_pixels must be 'truth' or 'both', got 'all'"):
        TrainRendererArgs(out="o", vae_object_pixels="all")


def test_the_loss_weighs_the_reconstructions_strokes_on_the_room_only_when_symmetric():
    from pipeline.training.renderer_parts import reconstruction_loss

    x = torch.full((1, 3, 4, 4), -1.0)  # a room of one colour
    x[..., 0, 3] = 1.0  # one object pixel in the truth
    recon = x.clone()
    recon[..., 3, 0] = 0.0  # a stroke drawn on the room, error 1 on 3 channels: L1 + MSE = 2 per channel
    # truth only: weights 10 on the object pixel, 1 on the other 15; the stroke's pixel weighs 1
    assert reconstruction_loss(recon, x, 10.0, symmetric=False).item() == pytest.approx(2 * 3 / 3 / 25)
    # symmetric: the stroke's pixel weighs 10 as well (weights 10, 10 and 14 x 1)
    assert reconstruction_loss(recon, x, 10.0).item() == pytest.approx(2 * 10 * 3 / 3 / 34)


def test_varied_set_has_every_object_count_and_is_seeded_apart_from_the_report():
    from pipeline.evaluation.metrics import scene_groups

    states = varied_states(5, seed=3)
    assert len(states) == len(set(states)) == 6 + 3 * 5 and states == varied_states(5, seed=3)
    assert {k: len(v) for k, v in scene_groups(states).items() if k.startswith("objects=")} == {
        "objects=0": 6, "objects=1": 5, "objects=2": 5, "objects=3": 5}  # fmt: skip
    chosen = validation_states(TrainRendererArgs(out="o", eval_set="varied", eval_states=15, seed=0))
    assert len(chosen) == 21 and chosen[6:] != varied_states(5)[6:]  # not the reported set (seed 2026)


def test_training_runs_checkpoints_resumes_and_saves_a_loadable_renderer(tmp_path, capfd):
    out = tmp_path / "run"
    args = tiny_args(out, vae_steps=2, unet_steps=2, vae_batch=2, unet_batch=2, pool=8, eval_every=2,
                     eval_states=2, checkpoint_every=1)  # fmt: skip
    train_renderer(args)
    assert "Writing model shards" not in capfd.readouterr().err  # saves draw no bar of the libraries'
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


def test_with_a_captioner_the_vae_stage_reads_its_own_reconstructions_back(tmp_path, monkeypatch):
    """The VAE's round trip is the ceiling of the renderer's: it is logged at the end of stage 1, before the UNet."""
    import pipeline.training.renderer as trainer

    args = tiny_args(tmp_path / "run", vae_steps=1, unet_steps=1, vae_batch=2, unet_batch=2, pool=8, eval_every=1,
                     eval_states=2)  # fmt: skip
    truth = validation_states(args)

    class ReadsTheTruth:  # a captioner that reads back the held-out states, in the order they are drawn
        def caption(self, frames):
            assert len(frames) == len(truth)
            return list(truth)

    monkeypatch.setattr(trainer, "_load_captioner", lambda args, domain: ReadsTheTruth())
    train_renderer(args)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    (vae_final,) = [r for r in log if r["stage"] == "vae" and r.get("final")]
    assert vae_final["eval"]["roundtrip_acc"] == 1.0


def test_a_resumed_run_keeps_best_unless_it_beats_the_score_best_was_saved_with(tmp_path):
    """best/ is chosen over the whole run: a run resumed from its checkpoint compares its evaluations with the one
    best/ holds, instead of replacing it with the first evaluation after the restart."""
    out = tmp_path / "run"
    common = dict(
        vae_steps=2, vae_batch=2, unet_batch=2, pool=8, eval_every=1, eval_states=2, checkpoint_every=1
    )
    train_renderer(tiny_args(out, unet_steps=2, **common))
    metrics_path = out / "best" / "metrics.json"
    saved = json.loads(metrics_path.read_text())
    unbeatable = {**saved, "frame_acc": 2.0}  # no evaluation reaches it: best/ must stay as it is
    metrics_path.write_text(json.dumps(unbeatable))
    train_renderer(tiny_args(out, unet_steps=3, **common))
    assert json.loads(metrics_path.read_text()) == unbeatable
    done = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()][-1]
    assert done["stage"] == "done" and done["best"]["score"] == 2.0


def test_resuming_with_arguments_of_another_run_is_refused_by_name(tmp_path):
    """A checkpoint continues only the run it belongs to: another rate, pool or seed in the same --out is one line
    that names what changed (e.g. `train all` after a recipe was renamed); a larger budget still resumes."""
    from pipeline.utils import UserError

    out = tmp_path / "run"
    common = dict(vae_steps=2, vae_batch=2, unet_batch=2, pool=8, eval_every=2, eval_states=2)
    train_renderer(tiny_args(out, unet_steps=1, **common))
    with pytest.raises(UserError, match=r"different renderer run \(unet_lr 0.0008 -> 0.0001\)"):
        train_renderer(tiny_args(out, unet_steps=2, unet_lr=1e-4, **common))
    with pytest.raises(UserError, match=r"seed 0 -> 1, count_weights"):
        train_renderer(tiny_args(out, unet_steps=2, seed=1, count_weights=(0.0, 0.2, 0.4, 0.4), **common))
    with pytest.raises(
        UserError, match=r"clip_warmup None -> 1750"
    ):  # a recording domain's clips from elsewhere
        train_renderer(tiny_args(out, unet_steps=2, clip_warmup=1750, **common))
    train_renderer(tiny_args(out, unet_steps=2, **common))
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 2


def test_a_fine_tune_starts_stage_two_from_a_saved_renderer(tmp_path):
    """init_from loads a saved renderer's networks and skips the VAE stage; the encoder, frozen in stage 2, is
    the saved one bit for bit. A folder that is not a renderer, or one of other shapes, is refused by name."""
    from diffusers import AutoencoderKL

    base = tmp_path / "base"
    train_renderer(tiny_args(base, vae_steps=2, unet_steps=2, vae_batch=2, unet_batch=2, pool=8, eval_every=2,
                             eval_states=2))  # fmt: skip
    tuned = tmp_path / "tuned"
    train_renderer(tiny_args(tuned, unet_steps=2, unet_batch=2, vae_batch=2, pool=8, eval_every=1, eval_states=3,
                             eval_set="varied", init_from=str(base / "pipeline"), seed=1))  # fmt: skip
    log = [json.loads(line) for line in (tuned / "log.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in log} == {"unet", "done"}  # no VAE stage
    assert torch.load(tuned / "checkpoint.pt", weights_only=False)["step"] == 2
    before = AutoencoderKL.from_pretrained(base / "pipeline" / "vae").encoder.state_dict()
    after = AutoencoderKL.from_pretrained(tuned / "pipeline" / "vae").encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    unet_before = torch.load(base / "checkpoint.pt", weights_only=False)["unet"]
    unet_after = torch.load(tuned / "checkpoint.pt", weights_only=False)["unet"]
    assert any(not torch.equal(unet_before[k], unet_after[k]) for k in unet_before)  # and it did train

    with pytest.raises(ValueError, match="init_from: .* is not a saved renderer"):
        train_renderer(tiny_args(tmp_path / "x", unet_steps=1, init_from=str(tmp_path)))
    with pytest.raises(ValueError, match="init_from: the unet of .* does not match"):
        train_renderer(tiny_args(tmp_path / "y", unet_steps=1, unet_channels=(16, 48),
                                 init_from=str(base / "pipeline")))  # fmt: skip


def test_a_fine_tune_may_refit_the_saved_vae_before_stage_two(tmp_path):
    """With refit_vae a fine-tune runs stage 1 again from the saved VAE (the encoder moves this time), then
    stage 2 from the saved UNet."""
    from diffusers import AutoencoderKL

    base = tmp_path / "base"
    common = dict(vae_batch=2, unet_batch=2, pool=8, eval_every=2, eval_states=2)
    train_renderer(tiny_args(base, vae_steps=2, unet_steps=2, **common))
    tuned = tmp_path / "tuned"
    train_renderer(tiny_args(tuned, vae_steps=2, unet_steps=2, refit_vae=True, init_from=str(base / "pipeline"),
                             seed=1, **common))  # fmt: skip
    log = [json.loads(line) for line in (tuned / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["stage"] == "vae" and r.get("final")] == [2]
    before = AutoencoderKL.from_pretrained(base / "pipeline" / "vae").encoder.state_dict()
    after = AutoencoderKL.from_pretrained(tuned / "pipeline" / "vae").encoder.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_with_ema_the_saved_renderer_is_the_average_and_it_resumes(tmp_path):
    """ema_decay keeps diffusers' EMAModel of stage 2: it is checkpointed, resumed, and what pipeline/ holds."""
    from diffusers import UNet2DConditionModel

    out = tmp_path / "run"
    common = dict(vae_steps=1, vae_batch=2, unet_batch=2, pool=8, eval_every=2, eval_states=2, checkpoint_every=1,
                  ema_decay=0.9)  # fmt: skip
    train_renderer(tiny_args(out, unet_steps=3, **common))
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["ema"]["optimization_step"] == 3
    saved = UNet2DConditionModel.from_pretrained(out / "pipeline" / "unet").state_dict()
    shadow = dict(zip(ckpt["unet"], ckpt["ema"]["shadow_params"]))  # the UNet's parameters come first
    names = [k for k in saved if k in shadow and saved[k].dtype.is_floating_point]
    half = lambda t: t.to(torch.float16)  # noqa: E731 (pipeline/ is stored in float16)
    assert names and all(torch.equal(half(saved[k]), half(shadow[k])) for k in names)
    assert any(not torch.equal(half(saved[k]), half(ckpt["unet"][k])) for k in names)  # not the raw ones

    train_renderer(tiny_args(out, unet_steps=4, **common))  # a larger budget resumes the average too
    assert torch.load(out / "checkpoint.pt", weights_only=False)["ema"]["optimization_step"] == 4
    with pytest.raises(ValueError, match=r"ema_decay must be in \[0, 1\), got 1.0"):
        TrainRendererArgs(out="o", ema_decay=1.0)

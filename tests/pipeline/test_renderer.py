"""The rendering stage: tiny random diffusers checkpoints (our layout and a Stable-Diffusion-Turbo-like one) saved
to disk and loaded through the same `Renderer` code, determinism, errors and the shipped weights (the metrics are
tested in tests/pipeline/evaluation/test_metrics.py, the trainer in tests/pipeline/training/test_renderer.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.renderer import Renderer, RenderSettings
from pipeline.training.image_args import TrainRendererArgs
from pipeline.training.renderer_parts import fresh_pipeline, save_renderer
from pipeline.utils import UserError
from tests.fakes import Stop, stop_at

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "weights" / "renderer"
STATES = ["red ball top left .", "blue box bottom right , lamp on .", "empty ."]


def tiny_args(out: Path, **overrides) -> TrainRendererArgs:
    fields = dict(
        out=str(out), image_size=32, output_size=48, vae_channels=(8, 16), vae_latent_channels=4,
        unet_channels=(16, 32), text_width=32, text_layers=1, sample_steps=2, guidance=1.0,
    )  # fmt: skip
    fields.update(overrides)
    return TrainRendererArgs(**fields)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("renderer")
    args = tiny_args(root / "run")
    save_renderer(fresh_pipeline(args), args, root / "tiny")
    return root / "tiny"


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> Renderer:
    return Renderer.from_pretrained(tiny_dir, device="cpu")


# ---- loading and rendering ----------------------------------------------------------------------------------
def test_tiny_checkpoint_has_the_stable_diffusion_layout(tiny_dir):
    index = json.loads((tiny_dir / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionPipeline"
    assert index["unet"] == ["diffusers", "UNet2DConditionModel"]
    assert index["vae"] == ["diffusers", "AutoencoderKL"]
    assert index["text_encoder"] == ["transformers", "CLIPTextModel"]
    assert index["scheduler"] == ["diffusers", "DPMSolverMultistepScheduler"]
    assert list((tiny_dir / "unet").glob("*.safetensors")) and not list(tiny_dir.rglob("*.bin"))
    assert json.loads((tiny_dir / "renderer.json").read_text())["steps"] == 2


def test_save_stores_float16_quietly_and_leaves_the_training_copy_alone(tmp_path, capfd):
    torch.manual_seed(0)
    args = tiny_args(tmp_path / "run")
    pipe = fresh_pipeline(args)
    capfd.readouterr()
    save_renderer(pipe, args, tmp_path / "saved")
    assert "kept in float32" not in capfd.readouterr().err  # diffusers' cast warning (its own stderr handler)
    assert pipe.unet.dtype == torch.float32 and pipe.text_encoder.dtype == torch.float32
    from safetensors import safe_open

    for part in ("unet", "vae", "text_encoder"):
        (weights,) = (tmp_path / "saved" / part).glob("*.safetensors")
        with safe_open(str(weights), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}, part


def test_render_returns_uint8_frames_at_the_output_size(tiny):
    assert type(tiny.pipe).__name__ == "StableDiffusionPipeline"
    assert tiny.draw_size == (32, 32) and tiny.size == (48, 48)
    frames = tiny.render(STATES, generator=torch.Generator().manual_seed(0))
    assert len(frames) == 3
    for frame in frames:
        assert frame.shape == (48, 48, 3) and frame.dtype == np.uint8
    assert tiny.render([]) == []


def test_a_height_and_width_output_size_is_kept_through_the_saved_settings(tmp_path):
    """A game's renderer draws a square and hands out its screen's (height, width), as renderer.json says."""
    torch.manual_seed(0)
    args = tiny_args(tmp_path / "run")
    save_renderer(fresh_pipeline(args), args, tmp_path / "game", output_size=(56, 40))
    assert json.loads((tmp_path / "game" / "renderer.json").read_text())["output_size"] == [56, 40]
    renderer = Renderer.from_pretrained(tmp_path / "game", device="cpu")
    assert renderer.size == (56, 40) and "frames resized to 40x56" in renderer.settings.describe()
    assert renderer.render(STATES[:1])[0].shape == (56, 40, 3)
    with pytest.raises(ValueError, match="output_size"):
        RenderSettings(output_size=(56, 40, 3))


def test_shipped_steps_set_the_saved_default_and_calls_may_still_ask_for_others(tmp_path, monkeypatch):
    """shipped_steps, not the evaluations' sample_steps, is what renderer.json gives the loaded renderer; a call's
    own steps still win."""
    torch.manual_seed(0)
    args = tiny_args(tmp_path / "run", shipped_steps=1)
    save_renderer(fresh_pipeline(args), args, tmp_path / "one")
    renderer = Renderer.from_pretrained(tmp_path / "one", device="cpu")
    assert args.sample_steps == 2 and renderer.default_steps == 1
    seen: list[int] = []
    call = renderer.pipe.__class__.__call__
    monkeypatch.setattr(renderer.pipe.__class__, "__call__",
                        lambda pipe, **kw: seen.append(kw["num_inference_steps"]) or call(pipe, **kw))  # fmt: skip
    renderer.render(STATES[:1])
    renderer.render(STATES[:1], steps=3)
    assert seen == [1, 3]
    with pytest.raises(ValueError, match="shipped_steps must be >= 1"):
        tiny_args(tmp_path / "bad", shipped_steps=0)


def test_same_generator_seed_gives_the_same_frames(tiny):
    a = tiny.render(STATES, generator=torch.Generator().manual_seed(3))
    b = tiny.render(STATES, generator=torch.Generator().manual_seed(3))
    c = tiny.render(STATES, generator=torch.Generator().manual_seed(4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    # No generator: a fresh one seeded 0, never the global RNG.
    torch.manual_seed(123)
    d = tiny.render(STATES[:1])
    torch.manual_seed(456)
    assert np.array_equal(d[0], tiny.render(STATES[:1])[0])


def test_one_call_draws_every_state_in_one_pass(tiny_dir):
    """The adapter does not batch (the world-model pipeline does): one diffusers call per render call."""
    renderer = Renderer.from_pretrained(tiny_dir, device="cpu")
    calls: list[int] = []
    original = renderer.pipe.__call__

    def counting(*args, **kwargs):
        calls.append(len(kwargs["prompt"]))
        return original(*args, **kwargs)

    renderer.pipe.__class__ = type(
        "Counting", (type(renderer.pipe),), {"__call__": lambda self, *a, **k: counting(*a, **k)}
    )
    frames = renderer.render(STATES * 2, steps=1)
    assert calls == [6] and len(frames) == 6


def test_steps_and_guidance_reach_the_pipeline(tiny):
    one = tiny.render(STATES[:1], steps=1)[0]
    two = tiny.render(STATES[:1], steps=2)[0]
    guided = tiny.render(STATES[:1], steps=2, guidance=3.0)[0]
    assert not np.array_equal(one, two) and not np.array_equal(two, guided)


def test_loading_honours_hf_hub_offline(tiny_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    renderer = Renderer.from_pretrained(str(tiny_dir), device="cpu", dtype=torch.float32)
    assert renderer.pipe.unet.dtype == torch.float32


def test_a_stable_diffusion_turbo_like_directory_loads_through_the_same_code(tmp_path):
    """A real SD/SD-Turbo checkpoint uses CLIPTokenizer and an Euler scheduler and has no renderer.json."""
    from diffusers import EulerAncestralDiscreteScheduler
    from transformers import CLIPTokenizer

    words = ["red", "ball", "top", "left", "."]
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in sorted(set("".join(words))):
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    for w in words:
        vocab.setdefault(w + "</w>", len(vocab))
    merges = ["#version: 0.2"]
    for w in words:  # merge left to right: r e -> re, re d</w> -> red</w>
        pieces = list(w[:-1]) + [w[-1] + "</w>"]
        while len(pieces) > 1:
            merges.append(f"{pieces[0]} {pieces[1]}")
            pieces = [pieces[0] + pieces[1]] + pieces[2:]
            vocab.setdefault(pieces[0], len(vocab))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    (tmp_path / "merges.txt").write_text("\n".join(dict.fromkeys(merges)) + "\n")
    clip_tok = CLIPTokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"), model_max_length=16)
    args = tiny_args(tmp_path / "run", max_length=16)
    pipe = fresh_pipeline(args)
    pipe.text_encoder.resize_token_embeddings(len(clip_tok))
    pipe.tokenizer = clip_tok
    pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(
        pipe.scheduler.config, prediction_type="epsilon"
    )
    pipe.register_modules(tokenizer=clip_tok, scheduler=pipe.scheduler)
    pipe.save_pretrained(tmp_path / "turbo")
    assert not (tmp_path / "turbo" / "renderer.json").exists()

    renderer = Renderer.from_pretrained(tmp_path / "turbo", device="cpu")
    assert renderer.settings == RenderSettings()  # generic defaults: 25 steps, guidance 7.5
    assert type(renderer.pipe.scheduler).__name__ == "EulerAncestralDiscreteScheduler"
    frames = renderer.render(
        ["red ball top left ."], generator=torch.Generator().manual_seed(0), steps=1, guidance=0.0
    )
    assert frames[0].shape == (32, 32, 3) and frames[0].dtype == np.uint8


# ---- errors -------------------------------------------------------------------------------------------------
def test_missing_directory_is_one_clear_user_error(tmp_path):
    with pytest.raises(UserError, match=r"renderer weights .*nope: no such directory; expected a diffusers"):
        Renderer.from_pretrained(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=r"file: not a directory"):
        Renderer.from_pretrained(tmp_path / "file")
    with pytest.raises(
        UserError, match=r"renderer weights .*: no model_index.json; expected a diffusers text-to-image"
    ):
        Renderer.from_pretrained(tmp_path)


def test_broken_checkpoints_are_one_clear_user_error(tiny_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dir, broken)
    (broken / "model_index.json").write_text("{not json")
    with pytest.raises(UserError, match=r"broken: model_index.json is not valid JSON"):
        Renderer.from_pretrained(broken)

    shutil.copy(tiny_dir / "model_index.json", broken / "model_index.json")
    shutil.rmtree(broken / "unet")
    with pytest.raises(UserError, match=r"broken: model_index.json names missing folders: unet"):
        Renderer.from_pretrained(broken)

    shutil.copytree(tiny_dir / "unet", broken / "unet")
    for weights in (broken / "unet").glob("*.safetensors"):
        weights.write_bytes(b"garbage")
    with pytest.raises(UserError, match=r"broken: could not load a diffusers text-to-image pipeline \("):
        Renderer.from_pretrained(broken)

    shutil.rmtree(broken / "unet")
    shutil.copytree(tiny_dir / "unet", broken / "unet")
    (broken / "renderer.json").write_text('{"steps": 0}')
    with pytest.raises(UserError, match=r"bad renderer.json \(steps must be a positive integer, got 0\)"):
        Renderer.from_pretrained(broken)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"states": "red ball top left ."}, "states must be a list of strings, got str"),
        ({"states": ["red ball top left .", ""]}, "states must be non-empty strings, got ''"),
        ({"states": STATES, "steps": 0}, "steps must be a positive integer, got 0"),
        ({"states": STATES, "guidance": -1.0}, "guidance must be a number >= 0, got -1.0"),
        ({"states": STATES, "generator": 7}, "generator must be a torch.Generator or None, got int"),
    ],
)
def test_bad_render_arguments_name_the_argument(tiny, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny.render(**kwargs)


# ---- the shipped weights ------------------------------------------------------------------------------------
@pytest.mark.skipif(
    not (SHIPPED / "model_index.json").is_file(), reason="weights/renderer/ is not shipped yet"
)
@pytest.mark.integration
def test_shipped_renderer_loads_offline_and_draws_world_frames(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    renderer = Renderer.from_pretrained(SHIPPED, device="cpu")
    assert renderer.settings.steps <= 8
    frames = renderer.render(STATES[:2])
    assert [f.shape for f in frames] == [(*renderer.size, 3)] * 2
    size = sum(p.stat().st_size for p in SHIPPED.rglob("*") if p.is_file())
    assert size <= 25 * 2**20


def test_step_callback_runs_after_every_step_and_can_stop_the_render(tiny):
    steps: list[int] = []
    tiny.render(STATES[:1], steps=3, step_callback=lambda: steps.append(1))
    assert len(steps) == 3

    steps.clear()
    with pytest.raises(Stop):
        tiny.render(STATES[:1], steps=50, step_callback=stop_at(2, steps))
    assert len(steps) == 2  # stopped right there, not at the end of the 50 steps
    assert tiny.default_steps == tiny.settings.steps

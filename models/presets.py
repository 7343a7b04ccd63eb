"""Every named configuration in one registry: the predictor shapes (the paper's three and small CPU ones) and the
recipes of the shipped weights (each stage's network config plus the training arguments it departs from).

A preset fixes the shape shared by the 4-tensor predictor and its 1-D baseline (|V|, d_x, d_t, H, L, N, T);
each model builds its own config from it. Counts are taken on the meta device, so nothing is allocated.
A recipe names a stage's network config (models.captioner / models.renderer, or a predictor preset) and the
fields of that stage's training arguments (pipeline.training.args) that differ from their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import torch

from models.baseline import BaselineConfig, BaselineModel
from models.captioner import CaptionerConfig
from models.four_tensor import FourTensorConfig
from models.four_tensor import count_parameters as count_four_tensor
from models.renderer import RendererConfig
from models.shape import PredictorShape

T = TypeVar("T")

PAPER_VOCAB = 36_711  # ROCStories pool, frequency >= 1 (section 8.1)


# ---- predictor shapes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Preset:
    """One named shape. vocab_size is nominal for the CPU presets: training replaces it with the tokenizer's."""

    name: str
    summary: str
    dims: PredictorShape
    # Parameter counts the paper reports, in millions (table 5), keyed by model kind.
    paper_params_m: dict[str, float] = field(default_factory=dict)

    def shape(self) -> dict[str, int]:
        """The keyword arguments both model configs take."""
        return self.dims.shape()


def _by_name(*items: Any) -> dict[str, Any]:
    """A registry: each item under its `name`, in order; a repeated name is an error."""
    registry = {item.name: item for item in items}
    if len(registry) != len(items):
        raise ValueError("registry entries must have distinct names")
    return registry


def _lookup(registry: dict[str, T], name: str, what: str) -> T:
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; known {what}s: {', '.join(registry)}")
    return registry[name]


def _preset(name: str, summary: str, *dims: int, paper: dict[str, float] | None = None) -> Preset:
    return Preset(name, summary, PredictorShape(*dims), dict(paper or {}))


PRESETS: dict[str, Preset] = _by_name(
    _preset("tiny", "tests and smoke runs (seconds on CPU)", 512, 8, 4, 2, 1, 8, 3),
    _preset("small", "quick CPU training on a few thousand windows", 4096, 16, 8, 2, 2, 16, 4),
    _preset("small-t8", "small with an 8-state window (the world's hide and blink fit inside it)",
            4096, 16, 8, 2, 2, 16, 8),
    _preset("small-t8-n20", "small-t8 with 20 token slots: a state of up to 19 words and its action (Freeway)",
            4096, 16, 8, 2, 2, 20, 8),
    _preset("small-t8-l3", "small-t8 with a third layer (grown from a small-t8 model with --grow-layer)",
            4096, 16, 8, 2, 3, 16, 8),
    _preset("medium", "overnight CPU training, d = 512", 8192, 32, 16, 2, 2, 16, 4),
    _preset("paper-h2-l2", "paper table 5, H=2 L=2", PAPER_VOCAB, 64, 32, 2, 2, 16, 4,
            paper={"four_tensor": 122.2, "baseline": 175.9}),
    _preset("paper-h4-l2", "paper table 5, H=4 L=2 (closest parameter match)", PAPER_VOCAB, 64, 32, 4, 2, 16, 4,
            paper={"four_tensor": 172.5, "baseline": 175.9}),
    _preset("paper-h4-l3", "paper table 5, H=4 L=3", PAPER_VOCAB, 64, 32, 4, 3, 16, 4,
            paper={"four_tensor": 256.4, "baseline": 226.2}),
)  # fmt: skip


def get_preset(name: str) -> Preset:
    """The preset called name; a ValueError lists the known names otherwise."""
    return _lookup(PRESETS, name, "preset")


def four_tensor_config(name: str, **overrides: Any) -> FourTensorConfig:
    """FourTensorConfig of a preset; overrides (vocab_size, end_ids, dropout, slice_causal, ...) win."""
    return FourTensorConfig(**{**get_preset(name).shape(), **overrides})


def parameter_counts(name: str) -> dict[str, int]:
    """{"four_tensor": n, "baseline": n} for the preset called name (meta device: nothing is allocated)."""
    shape: dict[str, Any] = get_preset(name).shape()
    with torch.device("meta"):
        baseline = BaselineModel(BaselineConfig(**shape))
    return {
        "four_tensor": count_four_tensor(FourTensorConfig(**shape)),
        "baseline": sum(p.numel() for p in baseline.parameters()),
    }


# ---- shipped recipes -------------------------------------------------------------------------------------
STAGES = ("captioner", "renderer", "predictor")


@dataclass(frozen=True)
class Recipe:
    """How one stage's weights are made.

    stage: "captioner", "renderer" or "predictor". model: the network's config (CaptionerConfig, RendererConfig)
    or, for the predictor, a preset name. train: fields of the stage's training arguments that differ from their
    defaults (validated when the arguments are built). data: the predictor's world data: clips of every scenario
    (clips, length; seed_offset, 0 if absent, is added to the run's seed), or a recording domain's clips (clips,
    length, seed_offset; warmup, the most steps played before each; policy, its behaviour policy, "mix" if
    absent). mix: more clips after those, each
    (scenarios, clips, seed offset) of data's length, e.g. ("memory", 1500, 0), or (scenarios, clips, seed
    offset, length) for clips of another length. init_from: the recipe whose result this one
    starts from (a fine-tune). seed_offset: added to the run's seed for this recipe's training (a later phase
    that draws another stream of scenes than the one before).
    """

    name: str
    stage: str
    summary: str
    model: CaptionerConfig | RendererConfig | str
    train: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    init_from: str | None = None
    mix: tuple[tuple[str, int, int] | tuple[str, int, int, int], ...] = ()
    seed_offset: int = 0

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"recipe {self.name!r}: stage must be one of {STAGES}, got {self.stage!r}")
        expected = {"captioner": CaptionerConfig, "renderer": RendererConfig, "predictor": str}[self.stage]
        if not isinstance(self.model, expected):
            raise ValueError(f"recipe {self.name!r}: a {self.stage} recipe's model is a {expected.__name__}")
        if self.stage == "predictor":
            get_preset(str(self.model))
        if self.mix and self.stage != "predictor":
            raise ValueError(f"recipe {self.name!r}: only a predictor recipe mixes world data")
        for part in self.mix:
            if (
                len(part) not in (3, 4)
                or not isinstance(part[0], str)
                or not isinstance(part[1], int)
                or part[1] < 1
                or (len(part) == 4 and not (isinstance(part[3], int) and part[3] >= 2))
            ):
                raise ValueError(
                    f"recipe {self.name!r}: a mix part is (scenarios, clips >= 1, seed offset) or "
                    f"(scenarios, clips >= 1, seed offset, length >= 2), got {part!r}"
                )
        object.__setattr__(self, "train", MappingProxyType(dict(self.train)))
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))


_QUICK_CAPTIONER = CaptionerConfig(
    image_size=32, patch_size=8, vision_layers=1, text_layers=1, hidden=32, heads=2
)
# weights/renderer's network, every phase: 80 px frames into a 5 x 5 latent (one latent pixel per world cell).
_RENDERER = RendererConfig(
    image_size=80,
    vae_channels=(8, 16, 32, 64, 64),
    vae_latent_channels=8,
    unet_channels=(64, 128, 128),
    text_width=128,
)
_QUICK_RENDERER = RendererConfig(
    image_size=32, vae_channels=(8, 16), unet_channels=(16, 32), text_width=32, text_layers=1
)

# The tensor memory of every phase of weights/predictor: the knobs of models.tensor_memory.TensorMemoryConfig that
# differ from their defaults (its d_emb is the preset's d_x * d_t).
_MEMORY: dict[str, Any] = {"forget_bias": 1.0}
# The training arguments every 8-state-window phase of weights/predictor shares (phase 4 on); each phase adds
# its epochs, rate and warmup.
_T8_TRAIN: dict[str, Any] = {
    "model": "four_tensor",
    "epochs": 1,
    "batch_size": 32,
    "val_fraction": 0.05,
    "lr_schedule": "cosine",
    "min_lr_ratio": 0.05,
    "target_slices": "last",
    "memory": _MEMORY,
    "bptt_windows": 8,
    "min_history": 4,
}

# The Atari captioners: Pong's 210 x 160 frames resized to 160 x 160 (a ball step of 4 RAM units stays 3-4
# pixels), 10 x 10 patches of 16; 30 epochs of 250 batches of 32 frames drawn from the recorded clips, with the
# decoder's attention pulled onto the place each word is read (Game.word_places): without it, the model reads
# the scores within a few epochs but hardly a position in fourteen.
_ATARI_CAPTIONER = CaptionerConfig(image_size=160)
_ATARI_CAPTIONER_TRAIN: dict[str, Any] = {
    "clips": 300, "clip_length": 64, "epochs": 30, "eval_frames": 1024, "test_clips": 40,
    "rescale_prob": 0.0, "noise_prob": 0.0,
}  # fmt: skip

# Pong's captioner from its fourth phase on: 12 epochs of fresh clips of drawn scores, twice as many, each phase's
# best chosen on twice as many val-split frames (at 99% a thousand frames hardly tell two epochs apart).
_PONG_CAPTIONER_LATE: dict[str, Any] = _ATARI_CAPTIONER_TRAIN | {
    "epochs": 12, "warmup_steps": 50, "clip_score_max": 20, "clips": 600, "eval_frames": 2048,
}  # fmt: skip

# The Atari renderers: the screen drawn as a 160 x 160 square (the captioner's view of it; the renderer hands it out
# at 210 x 160) through a VAE that halves it three times, to a 20 x 20 x 4 latent: Pong's ball is 2 x 3 pixels, and
# a 16x VAE (10 x 10) lost it in half the frames it encoded and drew it too faint to be read back. Pong's frames
# are mostly the same background, so small batches go far: the VAE on 8 frames a step, the UNet on 16 with the
# pixel loss through the decoder every other step (in the latent loss alone the ball weighs next to nothing); the
# paddles and the ball are under 1% of the screen, so the pixels that differ from the screen's static frame (the
# per-pixel median: walls and court) weigh 50 times more. The UNet is a quarter of the world's (widths 32, 64, 64:
# 1.7M parameters), which keeps a game's whole stack near 11 MB in float16 and a play step fast on a CPU.
_ATARI_RENDERER = RendererConfig(
    image_size=160, vae_channels=(8, 16, 32, 64), vae_latent_channels=4, unet_channels=(32, 64, 64)
)
_ATARI_RENDERER_TRAIN: dict[str, Any] = {
    "clips": 200, "clip_length": 64, "vae_steps": 2500, "vae_batch": 8, "vae_lr": 1.5e-3, "object_weight": 50.0,
    "vae_object_pixels": "truth", "unet_steps": 6000, "unet_batch": 16, "unet_lr": 5e-4, "timestep_power": 2.0,
    "decoder_every": 2, "pixel_weight": 1.0, "ema_decay": 0.998, "eval_every": 250, "eval_states": 256,
}  # fmt: skip
# Freeway's later renderer phases: the UNet (and the decoder) on fresh clips of drawn scores from every phase of a
# game, at 2e-4, saved to draw in one step.
_FREEWAY_RENDERER_LATE: dict[str, Any] = _ATARI_RENDERER_TRAIN | {
    "unet_lr": 2e-4, "eval_every": 500, "clip_warmup": 1750, "clip_score_max": 39, "shipped_steps": 1,
}  # fmt: skip

# The Atari predictors' arguments: 4 epochs of 40,000 windows at 1e-3, cosine, the loss on S(T).
_ATARI_TRAIN: dict[str, Any] = {
    "model": "four_tensor",
    "epochs": 4,
    "max_windows": 40000,
    "batch_size": 32,
    "lr": 1e-3,
    "lr_schedule": "cosine",
    "warmup_steps": 200,
    "min_lr_ratio": 0.05,
    "target_slices": "last",
}


def _game_captioner(
    game: str,
    phase2: dict[str, Any],
    what2: str,
    phase3: dict[str, Any],
    what3: str,
    name3: str | None = None,
) -> tuple[Recipe, Recipe, Recipe]:
    """A game's first three captioner phases: 30 epochs from scratch; 12 at a lower rate on fresh clips (seed + 1)
    with `phase2`'s changes; then `name3` (default: the shipped "<game>-captioner"), 6 at half that rate on fresh
    clips (seed + 2) with `phase3`'s changes."""
    return (
        Recipe(f"{game}-captioner-base", "captioner", f"phase 1 of weights/{game}/captioner: 30 epochs from scratch",
               _ATARI_CAPTIONER, _ATARI_CAPTIONER_TRAIN),
        Recipe(f"{game}-captioner-2", "captioner", f"phase 2 of weights/{game}/captioner: {what2}", _ATARI_CAPTIONER,
               _ATARI_CAPTIONER_TRAIN | {"epochs": 12, "lr": 4e-4, "warmup_steps": 50} | phase2,
               init_from=f"{game}-captioner-base", seed_offset=1),
        Recipe(name3 or f"{game}-captioner", "captioner",
               f"phase 3 of weights/{game}/captioner: {what3}" if name3 else f"weights/{game}/captioner: phase 3, {what3}",
               _ATARI_CAPTIONER, _ATARI_CAPTIONER_TRAIN | {"epochs": 6, "lr": 2e-4, "warmup_steps": 50} | phase3,
               init_from=f"{game}-captioner-2", seed_offset=2),
    )  # fmt: skip


def _pong_fresh_epoch(
    name: str, summary: str, preset: str, lr: float, seed_offset: int, init_from: str
) -> Recipe:
    """A later phase of weights/pong/predictor: one epoch of every window of 1,200 fresh clips (the run's seed +
    `seed_offset`) at `lr`, from `init_from`."""
    return Recipe(name, "predictor", summary, preset,
                  _ATARI_TRAIN | {"epochs": 1, "max_windows": None, "lr": lr, "warmup_steps": 100},
                  {"clips": 1200, "length": 256, "seed_offset": seed_offset}, init_from=init_from)  # fmt: skip


RECIPES: dict[str, Recipe] = _by_name(
    # weights/captioner: 36 epochs from scratch (the defaults), then a short fine-tune on jittered and natively
    # resized frames, so that the model reads frames that are not pixel-perfect world renders.
    Recipe("captioner-base", "captioner", "phase 1 of weights/captioner: 36 epochs from scratch",
           CaptionerConfig(), {"test_clips": 0}),
    Recipe("captioner", "captioner", "weights/captioner: phase 2, the fine-tune on nudged and resized frames",
           CaptionerConfig(), {"epochs": 8, "lr": 3e-4, "warmup_steps": 50, "augment_from": 0,
                               "jitter_prob": 0.5, "resize_prob": 0.3}, init_from="captioner-base"),
    # weights/renderer, phase 1, one seeded run: the VAE on 128-pixel world frames resized to 80, with the truth's
    # object pixels weighted, then the UNet + text encoder with the decoder fine-tuned alongside.
    Recipe("renderer-base", "renderer", "phase 1 of weights/renderer: VAE, then UNet + text encoder (x0, 4 steps)",
           _RENDERER,
           {"render_size": 128, "output_size": 128, "vae_lr": 1.5e-3, "vae_steps": 3000, "object_weight": 10.0,
            "vae_object_pixels": "truth",
            "unet_batch": 32, "unet_lr": 8e-4, "timestep_power": 2.0, "decoder_every": 2, "unet_steps": 2600,
            "pool": 8000, "eval_every": 250}),
    # Phase 2: stage 2 again on crowded scenes (45% with 3 objects, a 16,000-scene pool), with the pixel loss
    # through the decoder, best/ chosen by the round trip on the varied 1/2/3-object set.
    Recipe("renderer-2", "renderer", "phase 2 of weights/renderer: stage 2 on crowded scenes",
           _RENDERER,
           {"unet_steps": 4000, "unet_lr": 3e-4, "vae_lr": 6e-4, "pixel_weight": 1.0,
            "count_weights": (0.02, 0.18, 0.35, 0.45), "pool": 16000, "eval_every": 250, "eval_set": "varied",
            "eval_states": 240}, init_from="renderer-base"),
    # Phase 3: phase 2 again from its best/, with an exponential moving average of the weights (decay 0.998),
    # which steadies the evaluations between checkpoints.
    Recipe("renderer-3", "renderer", "phase 3 of weights/renderer: phase 2 again with a moving average",
           _RENDERER,
           {"unet_steps": 3000, "unet_lr": 3e-4, "vae_lr": 6e-4, "pixel_weight": 1.0,
            "count_weights": (0.02, 0.18, 0.35, 0.45), "pool": 16000, "eval_every": 250, "eval_set": "varied",
            "eval_states": 240, "ema_decay": 0.998}, init_from="renderer-2"),
    # Phase 4, the shipped weights/renderer: 3,000 more steps at half the rate on a fresh pool of scenes (seed + 1),
    # half of them with 3 objects; the moving average as in phase 3.
    Recipe("renderer-4", "renderer",
           "phase 4 of weights/renderer: half the rate on a fresh, more crowded pool",
           _RENDERER,
           {"unet_steps": 3000, "unet_lr": 1.5e-4, "vae_lr": 3e-4, "pixel_weight": 1.0,
            "count_weights": (0.02, 0.13, 0.35, 0.5), "pool": 16000, "eval_every": 250, "eval_set": "varied",
            "eval_states": 240, "ema_decay": 0.998}, init_from="renderer-3", seed_offset=1),
    # Phase 5, the last of `make weights`: lower rates on another fresh pool (seed + 2), 60% of it 3-object scenes.
    # A from-scratch chain needs it to come near the shipped files (phase 4), whose phase 1 was a longer run.
    Recipe("renderer", "renderer", "make weights' renderer: phase 5, a lower rate on a fresh pool, 60% 3-object",
           _RENDERER,
           {"unet_steps": 3000, "unet_lr": 1e-4, "vae_lr": 2e-4, "pixel_weight": 1.0,
            "count_weights": (0.02, 0.08, 0.3, 0.6), "pool": 16000, "eval_every": 250, "eval_set": "varied",
            "eval_states": 240, "ema_decay": 0.998}, init_from="renderer-4", seed_offset=2),
    # weights/predictor: the 4-tensor model with the tensor memory (docs/tensor-memory.md), trained from scratch
    # with the loss on S(T), then fine-tuned phase by phase on fresh clips: weighted to the scenes the phase before
    # got wrong, with an 8-state window from phase 4, on short histories from phase 5, with a third layer in
    # phase 11. docs/history.md has how each phase was chosen.
    Recipe("predictor-base", "predictor", "phase 1 of weights/predictor: with the memory, from scratch",
           "small", {"model": "four_tensor", "epochs": 4, "batch_size": 32, "lr": 1e-3, "val_fraction": 0.05,
                     "lr_schedule": "cosine", "warmup_steps": 200, "min_lr_ratio": 0.02, "target_slices": "last",
                     "memory": _MEMORY, "bptt_windows": 8}, {"clips": 3000, "length": 20},
           mix=(("memory", 1500, 0),)),
    Recipe("predictor-2", "predictor", "phase 2 of weights/predictor: 15,000 fresh clips, more collide, occlude, memory",
           "small", {"model": "four_tensor", "epochs": 2, "batch_size": 32, "lr": 5e-4, "val_fraction": 0.05,
                     "lr_schedule": "cosine", "warmup_steps": 100, "min_lr_ratio": 0.02, "target_slices": "last",
                     "memory": _MEMORY, "bptt_windows": 8},
           {"clips": 10000, "length": 20, "seed_offset": 3}, init_from="predictor-base",
           mix=(("collide,occlude", 3000, 4), ("memory", 2000, 5))),
    # Phase 3: one short epoch at a low rate on 7,000 more fresh clips weighted to bounce, appear and hide.
    Recipe("predictor-3", "predictor", "phase 3 of weights/predictor: 7,000 fresh clips, more bounce, appear, hide",
           "small", {"model": "four_tensor", "epochs": 1, "batch_size": 32, "lr": 2e-4, "val_fraction": 0.05,
                     "lr_schedule": "cosine", "warmup_steps": 50, "min_lr_ratio": 0.05, "target_slices": "last",
                     "memory": _MEMORY, "bptt_windows": 8},
           {"clips": 4000, "length": 20, "seed_offset": 6}, init_from="predictor-2",
           mix=(("bounce", 1500, 7), ("appear", 1000, 8), ("hide", 500, 9))),
    # Phase 4: the same network with an 8-state window (preset small-t8: no weight depends on T, so phase 3's
    # weights carry over), with front-padded windows so that histories of 4-7 states are trained as predict lays
    # them out. hide's walker is behind the screen 6 states: in the window.
    Recipe("predictor-4", "predictor", "phase 4 of weights/predictor: the 8-state window",
           "small-t8", _T8_TRAIN | {"epochs": 2, "lr": 3e-4, "warmup_steps": 100},
           {"clips": 5000, "length": 20, "seed_offset": 12}, init_from="predictor-3",
           mix=(("hide", 1000, 13), ("bounce", 500, 14), ("collide", 500, 15))),
    # Phases 5-7: one epoch each on 12-state clips, so that half the windows are short histories (4-7 true
    # states); each a lower rate than the last.
    Recipe("predictor-5", "predictor", "phase 5 of weights/predictor: short histories",
           "small-t8", _T8_TRAIN | {"lr": 2e-4, "warmup_steps": 50},
           {"clips": 7000, "length": 12, "seed_offset": 20}, init_from="predictor-4",
           mix=(("occlude", 2000, 21), ("hide", 1000, 22))),
    Recipe("predictor-6", "predictor", "phase 6 of weights/predictor: short histories of collide",
           "small-t8", _T8_TRAIN | {"lr": 1.5e-4, "warmup_steps": 30},
           {"clips": 3000, "length": 12, "seed_offset": 30}, init_from="predictor-5",
           mix=(("collide", 2000, 31), ("occlude", 1000, 32))),
    Recipe("predictor-7", "predictor", "phase 7 of weights/predictor: short histories of every scenario",
           "small-t8", _T8_TRAIN | {"lr": 1e-4, "warmup_steps": 30},
           {"clips": 5000, "length": 12, "seed_offset": 40}, init_from="predictor-6",
           mix=(("hide", 1000, 41), ("bounce", 1000, 42), ("collide", 500, 43), ("occlude", 500, 44))),
    # Phases 8-9: lower rates still, weighted to the short histories of occlude and collide. Phase 9's clips are
    # mostly 8 states long, so that every window of them is a short history; its 12-state parts keep the longer
    # ones.
    Recipe("predictor-8", "predictor", "phase 8 of weights/predictor: short histories, lr 7e-5",
           "small-t8", _T8_TRAIN | {"lr": 7e-5, "warmup_steps": 30},
           {"clips": 4000, "length": 12, "seed_offset": 50}, init_from="predictor-7",
           mix=(("hide", 1500, 51), ("occlude", 1000, 52), ("fast", 500, 53), ("collide", 500, 54))),
    Recipe("predictor-9", "predictor", "phase 9 of weights/predictor: 8-state clips of occlude and collide",
           "small-t8", _T8_TRAIN | {"lr": 7e-5, "warmup_steps": 30},
           {"clips": 3000, "length": 8, "seed_offset": 60}, init_from="predictor-8",
           mix=(("occlude", 1500, 61), ("collide", 1000, 62), ("all", 2000, 63, 12), ("hide", 500, 64, 12))),
    # Phase 10: one more epoch at lr 5e-5 on 9,000 fresh clips, mostly 8 states long, weighted to occlude, bounce
    # and hide.
    Recipe("predictor-10", "predictor", "phase 10 of weights/predictor: short histories of occlude, bounce, hide",
           "small-t8", _T8_TRAIN | {"lr": 5e-5, "warmup_steps": 30},
           {"clips": 3000, "length": 8, "seed_offset": 100}, init_from="predictor-9",
           mix=(("occlude", 2000, 101), ("bounce", 1000, 102), ("all", 2000, 103, 12), ("hide", 1000, 104, 12))),
    # Phase 11, the shipped weights/predictor: phase 10 grown to three layers. The new middle layer starts as the
    # identity (--grow-layer 1), the memory taps stay on the two trained layers (every 2nd layer: 0 and 2), and
    # three epochs at lr 1e-4 on 15,000 fresh clips, half of them 6 states long (every target a 4- or 5-state
    # history).
    Recipe("predictor", "predictor", "weights/predictor: phase 11, phase 10 grown to three layers",
           "small-t8-l3", _T8_TRAIN | {"lr": 1e-4, "warmup_steps": 100, "epochs": 3, "grow_layer": 1,
                                       "memory": _MEMORY | {"memory_every_n_layers": 2}},
           {"clips": 3000, "length": 8, "seed_offset": 120}, init_from="predictor-10",
           mix=(("collide", 2000, 121, 6), ("bounce", 2000, 122, 6), ("occlude", 2000, 123, 6),
                ("gravity", 1000, 124, 6), ("fast", 500, 125, 6), ("all", 3000, 126, 12), ("hide", 1500, 127, 12))),
    # The reference predictor without a tensor memory: the 4-tensor model on world state sequences of every
    # scenario (train split), 5% of the clips held out for the section 8.2 stopping rule. Phase 1 is the paper's
    # rule on 3,000 clips; phase 2 fine-tunes it on 24,000 clips (the first 3,000 are phase 1's) with a cosine
    # schedule, the loss on S(T) alone and state-level scheduled sampling.
    Recipe("predictor-plain-base", "predictor", "phase 1 of the predictor without memory: the paper's rule on 3,000 clips",
           "small", {"model": "four_tensor", "causal_slices": False, "max_windows": None, "epochs": 8,
                     "batch_size": 32, "lr": 1e-3, "val_fraction": 0.05}, {"clips": 3000, "length": 20}),
    Recipe("predictor-plain", "predictor", "the predictor without memory: phase 2, a rollout-aware fine-tune on 24,000 clips",
           "small", {"model": "four_tensor", "causal_slices": False, "max_windows": None, "epochs": 3,
                     "batch_size": 64, "lr": 1e-3, "val_fraction": 0.05, "lr_schedule": "cosine",
                     "warmup_steps": 200, "min_lr_ratio": 0.02, "target_slices": "last", "rollout_steps": 3,
                     "rollout_prob": 0.5}, {"clips": 24000, "length": 20}, init_from="predictor-plain-base"),
    # --quick: the same code paths in seconds (tests, smoke runs); the models they make are not worth shipping.
    Recipe("quick-captioner", "captioner", "smoke test of the captioner path", _QUICK_CAPTIONER,
           {"epochs": 1, "steps_per_epoch": 2, "batch_size": 4, "eval_frames": 8, "test_clips": 1,
            "warmup_steps": 1}),
    Recipe("quick-renderer-base", "renderer", "smoke test of the renderer's phase 1", _QUICK_RENDERER,
           {"output_size": 32, "vae_steps": 2, "unet_steps": 2, "vae_batch": 2, "unet_batch": 2, "pool": 8,
            "eval_every": 1000, "eval_states": 2, "checkpoint_every": 1, "sample_steps": 2}),
    Recipe("quick-renderer", "renderer", "smoke test of the renderer path (phase 2 on phase 1)", _QUICK_RENDERER,
           {"output_size": 32, "unet_steps": 2, "vae_batch": 2, "unet_batch": 2, "pool": 8, "eval_every": 2,
            "eval_set": "varied", "eval_states": 3, "pixel_weight": 1.0, "checkpoint_every": 1, "sample_steps": 2},
           init_from="quick-renderer-base"),
    Recipe("quick-predictor-base", "predictor", "smoke test of the predictor's phase 1", "tiny",
           {"model": "four_tensor", "causal_slices": False, "max_windows": 120, "epochs": 1,
            "batch_size": 32, "lr": 1e-3, "val_fraction": 0.05}, {"clips": 40, "length": 8}),
    Recipe("quick-predictor", "predictor", "smoke test of the predictor path (phase 2 on phase 1)", "tiny",
           {"model": "four_tensor", "causal_slices": False, "max_windows": 120, "epochs": 1,
            "batch_size": 32, "lr": 1e-3, "val_fraction": 0.05, "lr_schedule": "cosine", "warmup_steps": 2,
            "target_slices": "last", "rollout_steps": 2}, {"clips": 40, "length": 8},
           init_from="quick-predictor-base"),
    # weights/pong/predictor and weights/freeway/predictor (docs/atari.md): the 4-tensor model under actions, no
    # memory (each game's state holds what the 8-state window needs), on train-split clips of 256 states recorded
    # by the domain's `generate` under the mixed behaviour policy, sticky actions off.
    Recipe("pong-predictor-base", "predictor", "phase 1 of weights/pong/predictor: 4 epochs of 40,000 windows",
           "small-t8", _ATARI_TRAIN, {"clips": 340, "length": 256}),
    Recipe("pong-predictor-mid", "predictor", "phase 2 of weights/pong/predictor: 3 epochs of every window at half the rate",
           "small-t8", _ATARI_TRAIN | {"epochs": 3, "max_windows": None, "lr": 5e-4, "warmup_steps": 100},
           {"clips": 340, "length": 256}, init_from="pong-predictor-base"),
    Recipe("pong-predictor-wide", "predictor", "phase 3 of weights/pong/predictor: 3 epochs of every window of 1,200 clips",
           "small-t8", _ATARI_TRAIN | {"epochs": 3, "max_windows": None, "lr": 4e-4, "warmup_steps": 100},
           {"clips": 1200, "length": 256}, init_from="pong-predictor-mid"),
    # Phases 4 and 5: the paddles binned as the screen shows them (pipeline.domains.atari.games.Pong), each an
    # epoch of every window of 1,200 fresh clips (seed + 1, seed + 2), the second at a lower rate.
    _pong_fresh_epoch("pong-predictor-screen", "phase 4 of weights/pong/predictor: an epoch of fresh clips, screen bins",
                      "small-t8", 3e-4, 1, "pong-predictor-wide"),
    _pong_fresh_epoch("pong-predictor-screen-2", "phase 5 of weights/pong/predictor: an epoch of fresh clips at 2e-4",
                      "small-t8", 2e-4, 2, "pong-predictor-screen"),
    # Phases 6 to 9: a third layer, inserted as the identity between the two trained ones (--grow-layer 1), two
    # epochs of fresh clips at 3e-4 (seed + 3), then one more epoch of fresh clips at 1.5e-4 (seed + 4) and two at
    # 1e-4 (seed + 5, seed + 6).
    Recipe("pong-predictor-l3", "predictor", "phase 6 of weights/pong/predictor: phase 5 grown to three layers",
           "small-t8-l3", _ATARI_TRAIN | {"epochs": 2, "max_windows": None, "lr": 3e-4, "warmup_steps": 100,
                                          "grow_layer": 1},
           {"clips": 1200, "length": 256, "seed_offset": 3}, init_from="pong-predictor-screen-2"),
    _pong_fresh_epoch("pong-predictor-7", "phase 7 of weights/pong/predictor: an epoch of fresh clips at 1.5e-4",
                      "small-t8-l3", 1.5e-4, 4, "pong-predictor-l3"),
    _pong_fresh_epoch("pong-predictor-8", "phase 8 of weights/pong/predictor: an epoch of fresh clips at 1e-4",
                      "small-t8-l3", 1e-4, 5, "pong-predictor-7"),
    _pong_fresh_epoch("pong-predictor", "weights/pong/predictor: phase 9, one more epoch of fresh clips at 1e-4",
                      "small-t8-l3", 1e-4, 6, "pong-predictor-8"),
    Recipe("freeway-predictor-base", "predictor", "phase 1 of weights/freeway/predictor: Freeway states under actions",
           "small-t8-n20", _ATARI_TRAIN, {"clips": 340, "length": 256}),
    # Phase 2: 2 epochs on fresh clips drawn from every phase of a whole game (a game is 2,048 steps; up to 1,750
    # steps of play before each clip), so that late scores (10 and more) are not unseen words.
    Recipe("freeway-predictor-2", "predictor", "phase 2 of weights/freeway/predictor: clips from every phase of a game",
           "small-t8-n20", _ATARI_TRAIN | {"epochs": 2, "lr": 5e-4, "warmup_steps": 100},
           {"clips": 340, "length": 256, "seed_offset": 1, "warmup": 1750}, init_from="freeway-predictor-base"),
    # Phases 3 and 4: 2 epochs each on fresh clips under the "runs" policy, whose random actions are held for a
    # while: the mixed policy's crossing player only walks up, so the earlier phases never saw the chicken walked
    # down for a stretch and then turned round, and forecast it walking on down under "up". Phase 4 is shipped.
    Recipe("freeway-predictor-3", "predictor", "phase 3 of weights/freeway/predictor: clips with runs of held actions",
           "small-t8-n20", _ATARI_TRAIN | {"epochs": 2, "lr": 3e-4, "warmup_steps": 100},
           {"clips": 340, "length": 256, "seed_offset": 2, "warmup": 1750, "policy": "runs"},
           init_from="freeway-predictor-2"),
    Recipe("freeway-predictor", "predictor", "weights/freeway/predictor: phase 4, more clips with runs, at 2e-4",
           "small-t8-n20", _ATARI_TRAIN | {"epochs": 2, "lr": 2e-4, "warmup_steps": 100},
           {"clips": 340, "length": 256, "seed_offset": 3, "warmup": 1750, "policy": "runs"},
           init_from="freeway-predictor-3"),
    # weights/pong/captioner: the tiny BLIP on Pong's frames at 160 x 160 (10 x 10 patches), every frame of 300
    # train-split clips of 64 states under the mixed policy, decoded from their MP4 files; then a second phase;
    # then a third on clips each set to a player's score drawn from 0..20 (the mixed policy seldom scores 8).
    *_game_captioner("pong", {}, "12 epochs on 300 fresh clips", {"clip_score_max": 20},
                     "6 epochs on drawn scores 0..20", name3="pong-captioner-3"),
    # Phases 4 to 6: 12 epochs each on 600 fresh clips of drawn scores at falling rates, the best of each chosen on
    # 2,048 val-split frames; from phase 5 on a quarter of each batch comes from the twentieth of the training
    # frames the model reads worst (hard_share): the last misreads are a paddle half behind a wall or a position
    # a pixel from the edge of its bin, frames too few in a uniform draw.
    Recipe("pong-captioner-4", "captioner", "phase 4 of weights/pong/captioner: 12 epochs on 600 fresh clips",
           _ATARI_CAPTIONER, _PONG_CAPTIONER_LATE | {"lr": 2e-4}, init_from="pong-captioner-3", seed_offset=3),
    Recipe("pong-captioner-5", "captioner", "phase 5 of weights/pong/captioner: the same, hard frames drawn more",
           _ATARI_CAPTIONER, _PONG_CAPTIONER_LATE | {"lr": 1.5e-4, "hard_share": 0.25},
           init_from="pong-captioner-4", seed_offset=4),
    Recipe("pong-captioner", "captioner", "weights/pong/captioner: phase 6, as phase 5 at a lower rate",
           _ATARI_CAPTIONER, _PONG_CAPTIONER_LATE | {"lr": 1e-4, "hard_share": 0.25},
           init_from="pong-captioner-5", seed_offset=5),
    # weights/pong/renderer, phase 1: the VAE, then the UNet + text encoder on every frame of 200 train-split clips
    # of 64 states (decoded MP4), best/ chosen by the round trip through weights/pong/captioner on 256 val-split
    # frames.
    Recipe("pong-renderer-base", "renderer", "phase 1 of weights/pong/renderer: the VAE, then 6,000 UNet steps",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN),
    # Phase 2: the UNet + text encoder (and the decoder) further on 200 fresh clips (seed + 1) at the same constant
    # rate; the round trip was still rising when phase 1 ended.
    Recipe("pong-renderer-2", "renderer", "phase 2 of weights/pong/renderer: 6,000 UNet steps on 200 fresh clips",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN | {"unet_steps": 6000, "eval_every": 500},
           init_from="pong-renderer-base", seed_offset=1),
    # Phase 3, the shipped weights/pong/renderer: 4,000 steps at 2e-4 on 200 fresh clips (seed + 2); it draws in
    # one denoising step by default (renderer.json), its best.
    Recipe("pong-renderer", "renderer", "weights/pong/renderer: phase 3, 4,000 UNet steps at 2e-4 on fresh clips",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN | {"unet_steps": 4000, "unet_lr": 2e-4, "eval_every": 500,
                                                     "shipped_steps": 1},
           init_from="pong-renderer-2", seed_offset=2),
    # weights/freeway/captioner: Pong's two phases on Freeway's frames (the chicken's, the score's and the cars'
    # places from Freeway.word_places), the second on clips from every phase of a whole game (up to 1,750 steps of
    # play before each), where the score has two digits; then a third on such clips each set to a score drawn from
    # 0..39 (a good player's whole game makes about 30 crossings, the mixed policy's seldom 19).
    *_game_captioner("freeway", {"clip_warmup": 1750}, "12 epochs on fresh clips from every phase of a game",
                     {"clip_warmup": 1750, "clip_score_max": 39}, "6 epochs on drawn scores 0..39"),
    # Freeway's renderer, phase 1: Pong's first phase on clips from every phase of a game (up to 1,750 steps of play
    # before each), 8,000 UNet steps: the cars are drawn by step 1,500, the chicken only from about 3,500.
    Recipe("freeway-renderer-base", "renderer", "phase 1 of Freeway's renderer: the VAE, then 8,000 UNet steps",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN | {"unet_steps": 8000, "eval_every": 500, "clip_warmup": 1750}),
    # Phase 2: the UNet + text encoder (and the decoder) further on 200 fresh clips (seed + 1), each set to a score
    # drawn from 0..39 as in the captioner's third phase: play's clips hold a few scores each, too few to learn the
    # small digits from (phase 1 drew the score right in one frame of six).
    Recipe("freeway-renderer-2", "renderer", "phase 2 of Freeway's renderer: 5,000 UNet steps on clips of drawn scores",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN | {"unet_steps": 5000, "eval_every": 500, "clip_warmup": 1750,
                                                     "clip_score_max": 39},
           init_from="freeway-renderer-base", seed_offset=1),
    # Phase 3: the VAE refitted (encoder too) on 200 fresh clips of drawn scores, then the UNet continued on its
    # latents. The encoder had only seen phase 1's few scores: its own reconstructions of test screens read back
    # the score in about one frame of four.
    Recipe("freeway-renderer-3", "renderer", "phase 3 of Freeway's renderer: the VAE refitted on drawn scores",
           _ATARI_RENDERER, _ATARI_RENDERER_TRAIN | {"refit_vae": True, "vae_steps": 3500, "vae_lr": 5e-4,
                                                     "vae_object_pixels": "both", "unet_steps": 4000,
                                                     "unet_lr": 3e-4, "eval_every": 500, "clip_warmup": 1750,
                                                     "clip_score_max": 39, "shipped_steps": 1},
           init_from="freeway-renderer-2", seed_offset=2),
    # Phases 4 and 5 (the shipped weights/freeway/renderer): the UNet, text encoder and decoder further on fresh
    # clips of drawn scores at 2e-4, the VAE's encoder fixed. The decoder learns from the UNet's clean-latent
    # estimates through the pixel loss (decoder_every, pixel_weight), so together they draw digits that the
    # encoder's own latents carry only blurred: the round trip passes the refitted VAE's own read-back.
    Recipe("freeway-renderer-4", "renderer", "phase 4 of Freeway's renderer: 5,000 UNet steps on fresh drawn scores",
           _ATARI_RENDERER, _FREEWAY_RENDERER_LATE | {"unet_steps": 5000}, init_from="freeway-renderer-3",
           seed_offset=3),
    Recipe("freeway-renderer", "renderer", "weights/freeway/renderer: phase 5, 6,000 more UNet steps, fresh clips",
           _ATARI_RENDERER, _FREEWAY_RENDERER_LATE | {"unet_steps": 6000}, init_from="freeway-renderer-4",
           seed_offset=4),
    Recipe("quick-pong-renderer", "renderer", "smoke test of an Atari renderer", _QUICK_RENDERER,
           {"clips": 2, "clip_length": 8, "vae_steps": 2, "vae_batch": 2, "unet_steps": 2, "unet_batch": 2,
            "eval_every": 2, "eval_states": 4, "pool": 1}),
    Recipe("quick-pong-captioner", "captioner", "smoke test of an Atari captioner", _QUICK_CAPTIONER,
           {"epochs": 1, "steps_per_epoch": 2, "batch_size": 4, "eval_frames": 8, "test_clips": 1,
            "warmup_steps": 1, "clips": 2, "clip_length": 8}),
    Recipe("quick-pong-predictor", "predictor", "smoke test of an Atari predictor", "small-t8",
           {**_ATARI_TRAIN, "max_windows": 120, "epochs": 1}, {"clips": 2, "length": 40}),
)  # fmt: skip


def get_recipe(name: str) -> Recipe:
    """The recipe called name; a ValueError lists the known names otherwise."""
    return _lookup(RECIPES, name, "recipe")

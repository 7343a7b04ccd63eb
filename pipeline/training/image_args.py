"""The arguments of the image trainers, one documented dataclass each (each field is a flag of its `semworld
train` command, derived by pipeline.cli.flags): the captioner, the renderer and the pixel-space baseline."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from models.captioner import CaptionerConfig
from models.checks import check_at_least
from models.pixel import PixelConfig
from models.renderer import RendererConfig
from pipeline.utils import UserError


# ---- the optimiser the captioner and the pixel model share ---------------------------------------------------
@dataclass(kw_only=True)
class AdamWArgs:
    """AdamW with a linear warmup, then a cosine decay (the captioner's and the pixel model's optimiser).

    lr / min_lr_ratio / warmup_steps / weight_decay / grad_clip: AdamW at lr after warmup_steps of linear
        warmup, then cosine decay to lr * min_lr_ratio at the last step; gradients clipped to norm grad_clip.
    """

    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0

    def check_optimizer(self) -> None:
        """A UserError naming the flag when a setting cannot train."""
        if self.lr <= 0 or not 0 < self.min_lr_ratio <= 1:
            raise UserError(
                f"--lr must be > 0 and --min-lr-ratio in (0, 1], got {self.lr}, {self.min_lr_ratio}"
            )
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.grad_clip <= 0:
            raise UserError("--warmup-steps and --weight-decay must be >= 0 and --grad-clip > 0")


# ---- the clips a recording domain's image stages learn from --------------------------------------------------
@dataclass(kw_only=True)
class RecordedClipsArgs:
    """Where the captioner's and the renderer's frames come from.

    domain: "shapes" (the built-in world, whose frames are drawn for each state) or a domain that records clips
        (an Atari game): its frames come from `clips` train-split clips of `clip_length` states, recorded once
        into the run's data-train folder (MP4, decoded as a user's clip is); the held-out frames come from
        val-split clips.
    clips / clip_length: the number and length of those training clips.
    clip_warmup: each clip starts after up to this many steps of play, drawn per clip (None: the game's default);
        a whole game of Freeway is 2,048 steps, and its score has two digits after 9 crossings.
    clip_score_max: each clip's score is set to one drawn from 0..this before its first state, which the screen
        then shows (None: the score play reached). For a game whose scores play seldom reaches (Freeway past 18).
    """

    domain: str = "shapes"
    clips: int = 300
    clip_length: int = 64
    clip_warmup: int | None = None
    clip_score_max: int | None = None


def refuse_other_run(saved: dict[str, Any] | None, now: dict[str, Any], keys: tuple[str, ...], what: str,
                     path: Any) -> None:  # fmt: skip
    """Refuse to resume the checkpoint at `path`, saved with arguments `saved`, under arguments `now` that differ
    in any of `keys`: those make another run, and continuing one recipe's checkpoint as another's (a recipe
    renamed, another --clips) would mix two runs silently. A checkpoint saved without its arguments is allowed."""
    if saved is None:
        return
    now = json.loads(json.dumps(now))  # tuples as lists, as they were saved
    before = json.loads(json.dumps(saved))
    diff = [k for k in keys if k in before and before[k] != now.get(k)]
    if diff:
        changes = ", ".join(f"{k} {before[k]} -> {now.get(k)}" for k in diff)
        raise UserError(
            f"{path} holds a checkpoint of a different {what} run ({changes}); use another output folder or "
            f"delete {path}"
        )


# ---- the captioner (`semworld train captioner`) ----------------------------------------------------------
@dataclass
class TrainCaptionerArgs(AdamWArgs, RecordedClipsArgs):
    """Arguments of `semworld train captioner` (every field is a flag: --out, --epochs, --steps-per-epoch, ...;
    the optimiser's are AdamWArgs', where the frames come from RecordedClipsArgs': a recording domain's held-out
    set is val-split clips, its test set `test_clips` test-split clips).

    out: directory for the final model in the Hugging Face layout (config.json, model.safetensors, processor
        and tokenizer files); it is written when the run ends, holding the best evaluated weights.
    run_dir: checkpoints (checkpoint.pt, written atomically each epoch) and the JSON-lines log (log.jsonl);
        a run started again with the same run_dir resumes from its checkpoint.
    seed: seeds the model initialisation, every epoch's frames (seed, epoch) and the held-out set.
    epochs / steps_per_epoch / batch_size: fresh random frames every step, so an epoch is just a unit of
        evaluation and checkpointing; epochs * steps_per_epoch * batch_size frames are seen in all.
    count_weights: relative frequency of scenes with 0, 1, 2, 3 objects (the most crowded are the hardest).
    degrade_prob: fraction of training frames sent through a JPEG round trip (robustness to decoded video).
    jitter_prob / resize_prob: fractions of training frames whose objects sit up to 0.15 cell off their cell's
        centre / that are drawn natively at 56-192 px and resized to 128 (see make_examples); from augment_from.
    init_from: a saved captioner folder (this layout) to start from instead of a random initialisation: the
        fine-tuning phase of the shipped captioner's recipe (the "captioner" recipe of models/presets.py).
    rescale_prob / noise_prob: fractions of training frames drawn small and scaled back up (soft, as the
        renderer's low-resolution frames) / given Gaussian pixel noise; both only from epoch `augment_from`
        on (a curriculum: clean frames first, then the harder ones).
    eval_frames: size of the seeded held-out set, balanced over object counts; evaluated by exact match.
    attn_weight: weight of the attention-supervision loss: while it writes an object's words, the decoder's
        cross-attention (mean over layers and heads) is pulled onto that object's cell (-log of its share).
        Without it the decoder reads colours and shapes from the whole image but learns *where* only after a
        long plateau. Used for the built-in world when the ViT grid equals its grid (image_size / patch_size
        == 5), and for a recording domain that says where each word is read (an Atari game's word_places: the
        ball's numbers on the ball, a paddle's on the paddle); 0 turns it off.
    hard_share / hard_top / hard_every: a recording domain's training frames the model reads worst, drawn more
        often: every `hard_every` epochs the pool is ranked by the model's mean token loss on each frame (one
        teacher-forced pass), the top `hard_top` of it is the hard set, and `hard_share` of each batch comes from
        that set (the rest uniformly from the pool). For the last few misreads of a nearly right model: a
        paddle half behind a wall, a position a pixel from the edge of its bin. 0 (the default) turns it off.
    target: stop early once held-out exact match reaches this; None (the default) trains the whole schedule,
        whose low-learning-rate end makes the model steadier on degraded frames than stopping at the first
        perfect evaluation.
    test_clips: at the end, the saved model is reloaded through `Captioner` and scored on the frames of this
        many clips of the world's test split (0: skip).
    threads: torch CPU threads (1 leaves the other core of a shared machine free).
    progress: draw a progress bar per epoch (off: the log lines alone, e.g. in a background job's log file).
    model: the BLIP shape (see CaptionerConfig).
    """

    out: str
    run_dir: str = "runs/captioner"
    seed: int = 0
    # the schedule: fresh frames every step, an epoch is a unit of evaluation
    epochs: int = 36
    steps_per_epoch: int = 250
    batch_size: int = 32
    lr: float = field(default=1.5e-3, kw_only=True)  # the rest of AdamWArgs as it is
    # the frames: scene mix and augmentations
    count_weights: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4)
    degrade_prob: float = 0.2  # every epoch
    rescale_prob: float = 0.25  # these four from epoch augment_from on
    noise_prob: float = 0.15
    jitter_prob: float = 0.0
    resize_prob: float = 0.0
    augment_from: int = 12
    # where it starts, how it is judged
    init_from: str | None = None
    eval_frames: int = 800
    attn_weight: float = 1.0
    hard_share: float = 0.0
    hard_top: float = 0.05
    hard_every: int = 4
    target: float | None = None
    test_clips: int = 200
    # the machine
    threads: int = 1
    device: str = "cpu"
    progress: bool = True
    model: CaptionerConfig = field(default_factory=CaptionerConfig)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = CaptionerConfig(**self.model)
        self.count_weights = tuple(float(w) for w in self.count_weights)
        check_at_least(self, ("epochs", "steps_per_epoch", "batch_size", "eval_frames", "threads", "clips",
                              "clip_length", "hard_every"))  # fmt: skip
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError(f"target must be in (0, 1] or None, got {self.target}")
        self.check_optimizer()
        if not 0 < self.hard_top <= 1:
            raise ValueError(f"hard_top must be in (0, 1], got {self.hard_top}")
        probabilities = (
            "degrade_prob",
            "rescale_prob",
            "noise_prob",
            "jitter_prob",
            "resize_prob",
            "hard_share",
        )
        for name in probabilities:
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if len(self.count_weights) < 1 or min(self.count_weights) < 0 or sum(self.count_weights) <= 0:
            raise ValueError(
                f"count_weights must be non-negative with a positive sum, got {self.count_weights}"
            )

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


# ---- the renderer (`semworld train renderer`) ------------------------------------------------------------
@dataclass
class TrainRendererArgs(RecordedClipsArgs):
    """Arguments of `semworld train renderer` (each field is a flag: --out, --vae-steps, ...; where the frames come
    from, RecordedClipsArgs': a recording domain's frames are resized to image_size squares, its held-out frames
    are eval_states frames spread through val-split clips, and the saved renderer hands frames out at the
    screens' own size).

    out: run directory: checkpoint.pt (atomic, resumable), log.jsonl, strips/*.png (truth | render) and, when
        the run ends, pipeline/ (the diffusers checkpoint, save_pretrained with safetensors).
    image_size: side of the frames the model draws (the world renders them at this size). 80 with a VAE that
        downsamples 16x gives a 5 x 5 latent: one latent pixel per cell of the world's 5 x 5 grid, which makes
        the UNet ~6x cheaper per sample than 16 x 16 latents (the shipped captioner reads frames at 64 anyway).
    output_size: side of the frames the Renderer adapter hands out (resized from image_size; 128 = the world's);
        a recording domain's renderer hands out its screens' (height, width) instead.
    render_size: the world draws the training frames at this size, then they are resized to image_size. 128 keeps the sprites' exact sub-pixel geometry of the world's 128-pixel frames, which
        the shipped captioner depends on (it reads 80-pixel world frames resized to 128 with ~6% exact match).
    seed: seeds the data stream, initialisation and sampling.
    count_weights: relative frequency of scenes with 0, 1, 2, 3 objects in the training stream.
    vae_channels / vae_latent_channels: AutoencoderKL widths per level (len - 1 = number of 2x downsamplings)
        and latent channels.
    vae_steps, vae_batch, vae_lr, kl_weight: stage 1 optimisation (L1 + MSE reconstruction + kl_weight * KL).
    vae_sample: decode a draw from the posterior (the textbook VAE) instead of its mean; the draw's unit noise
        at initialisation drowns the sprites' colour and shape for hundreds of steps, so the mean is the default.
    object_weight: reconstruction weight of pixels that differ from the room's colour (objects, screen, lamp).
    vae_object_pixels: which pixels get object_weight in stage 1: "truth" (those of the true frame's objects) or
        "both" (also where the reconstruction draws something on the room). From scratch, "both" weighs every
        blurred halo of the young decoder like a sprite and the VAE never learns the sprites' colours (objects in
        the right cell and colour 21% after 2,200 steps, against 55% at 1,000 with "truth"). Stage 2's decoder
        steps always use "both".
    unet_channels: UNet2DConditionModel widths per level; every level but the first has cross-attention.
    text_width, text_layers, max_length: the CLIP text encoder (trained from scratch with the UNet).
    unet_steps, unet_batch, unet_lr: stage 2 optimisation.
    prediction_type: what the UNet predicts: "sample" (x0), "epsilon" or "v_prediction".
    cond_dropout: probability of training with the empty prompt (enables classifier-free guidance > 1).
    timestep_power: training timesteps are (1 - u**power) * (T - 1), u uniform: 1 is uniform, 2 puts more weight
        on the noisy end, where few-step sampling decides what goes where.
    decoder_every: in stage 2, also train the VAE decoder (on the cached latents of the frozen encoder) every
        this many UNet steps, with vae_batch frames (0 = never): the decoder keeps sharpening while the UNet learns.
    pixel_weight: with prediction_type "sample", on those same steps the decoder learns from the UNet's clean-latent
        estimates instead, with this weight on the pixel loss through the decoder, which also reaches the UNet.
    sample_steps, guidance: how evaluation samples (and the defaults written to renderer.json).
    shipped_steps: the denoising steps renderer.json gives as the saved renderer's default, when not
        sample_steps (None). Training and its evaluations do not read it. The Atari renderers predict the clean
        latent (prediction_type "sample") of frames their states fix: one step draws the conditional mean,
        sharpest; each further step of the multistep solver adds noise back that the small UNet then has to
        remove again (Pong's round trip 98 / 97 / 91% in 1 / 2 / 4 steps; docs/atari.md).
    pool: number of distinct training scenes whose latents are cached (drawn once, seeded).
    eval_every, eval_states: evaluation period (steps) and size (states drawn at each evaluation).
    eval_set: what the evaluations draw, and so what `best/` is chosen by: "test" (eval_states distinct states of
        test-split world clips, mostly 1-2 objects) or "varied" (the six states without objects and
        eval_states // 3 distinct random scenes each of 1, 2 and 3 objects; round trip by object count logged).
    ema_decay: in stage 2, keep an exponential moving average of the trained weights with this decay
        (diffusers' EMAModel, warmed up as (1 + step) / (10 + step)); evaluations, best/ and pipeline/ use the
        average. 0 = off. With the pixel loss, single checkpoints' round trips swing by 10-30 points.
    init_from: a saved renderer folder (e.g. weights/renderer): stage 2 starts from its VAE, UNet and text
        encoder and the VAE stage is skipped, unless refit_vae (a fine-tune); its networks must have the shapes
        these arguments give.
    refit_vae: with init_from, run stage 1 again first, vae_steps more steps from the saved VAE (encoder and
        decoder), before stage 2 continues the saved UNet on the new latents: for data whose objects the saved
        encoder never saw drawn (Freeway's score digits, which its first phase saw a few of). Without init_from it
        changes nothing: a fresh run fits its VAE anyway.
    checkpoint_every: steps between atomic checkpoints.
    vae_minutes / unet_minutes: optional wall-clock caps per stage (0 = none; steps are the reproducible stop).
    threads: torch intra-op threads (1 leaves the other core to everyone else).
    captioner: optional captioner directory for the round-trip metric at evaluation.
    progress: draw progress bars (off: the log lines alone, e.g. in a background job's log file).
    """

    out: str
    image_size: int = 80
    output_size: int = 128
    render_size: int = 128
    seed: int = 0
    count_weights: tuple[float, ...] = (0.05, 0.25, 0.35, 0.35)
    vae_channels: tuple[int, ...] = (8, 16, 32, 64, 64)
    vae_latent_channels: int = 8
    vae_steps: int = 2200
    vae_batch: int = 16
    vae_lr: float = 1.5e-3
    kl_weight: float = 1e-6
    object_weight: float = 10.0
    vae_object_pixels: str = "truth"
    vae_sample: bool = False
    unet_channels: tuple[int, ...] = (64, 128, 128)
    text_width: int = 128
    text_layers: int = 2
    max_length: int = 16
    unet_steps: int = 2600
    unet_batch: int = 32
    unet_lr: float = 8e-4
    prediction_type: str = "sample"
    cond_dropout: float = 0.0
    timestep_power: float = 2.0
    decoder_every: int = 2
    pixel_weight: float = 0.0
    sample_steps: int = 4
    shipped_steps: int | None = None
    guidance: float = 1.0
    pool: int = 8000
    eval_every: int = 250
    eval_states: int = 64
    eval_set: str = "test"
    ema_decay: float = 0.0
    init_from: str | None = None
    refit_vae: bool = False
    checkpoint_every: int = 200
    vae_minutes: float = 0.0
    unet_minutes: float = 0.0
    threads: int = 1
    captioner: str | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.model_config()  # validates the network's shape (models.renderer.RendererConfig)
        if self.render_size < 32:
            raise ValueError(
                f"render_size must be >= 32 (the world's smallest frame), got {self.render_size}"
            )
        if self.output_size < 8 or self.output_size % 8:
            raise ValueError(f"output_size must be a multiple of 8, got {self.output_size}")
        if self.pixel_weight < 0 or (self.pixel_weight > 0 and self.prediction_type != "sample"):
            raise ValueError(
                f"pixel_weight must be >= 0, and 0 unless prediction_type is 'sample', got {self.pixel_weight}"
            )
        if self.object_weight < 1:
            raise ValueError(f"object_weight must be >= 1, got {self.object_weight}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if self.vae_object_pixels not in ("truth", "both"):
            raise ValueError(f"vae_object_pixels must be 'truth' or 'both', got {self.vae_object_pixels!r}")
        if self.shipped_steps is not None and self.shipped_steps < 1:
            raise ValueError(f"shipped_steps must be >= 1 (or None: sample_steps), got {self.shipped_steps}")
        if self.eval_set not in ("test", "varied"):
            raise ValueError(f"eval_set must be 'test' or 'varied', got {self.eval_set!r}")
        if self.timestep_power <= 0:
            raise ValueError(f"timestep_power must be > 0, got {self.timestep_power}")
        if not 0 <= self.cond_dropout < 1:
            raise ValueError(f"cond_dropout must be in [0, 1), got {self.cond_dropout}")
        if len(self.count_weights) < 1 or len(self.count_weights) > 4 or min(self.count_weights) < 0:
            raise ValueError(
                f"count_weights needs 1-4 non-negative weights (0..3 objects), got {self.count_weights}"
            )
        check_at_least(self, ("vae_steps", "unet_steps", "decoder_every"), 0)
        check_at_least(
            self,
            ("vae_batch", "unet_batch", "sample_steps", "eval_every", "eval_states", "checkpoint_every", "threads",
             "pool", "clips", "clip_length"),
        )  # fmt: skip

    def model_config(self) -> RendererConfig:
        """The network's shape among these arguments."""
        return RendererConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RendererConfig)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- the pixel-space baseline (`semworld train pixel`) ----------------------------------------------------
@dataclass
class TrainPixelArgs(AdamWArgs):
    """Arguments of `semworld train pixel` (each field is a flag: --out, --steps, --batch-size, ...; the
    optimiser's are AdamWArgs', its cosine over `steps`).

    out: run directory: checkpoint.pt (atomic, resumable: rerun the same command), log.jsonl, loss_curve.png,
        training_summary.json and model/ (config.json + model.safetensors, rewritten at every evaluation).
    seed: seeds the initialisation and every step's batch (step s draws from (seed, s), so a resumed run sees
        the batches an uninterrupted one would).
    domain: whose clips it learns: "shapes" (the built-in world, drawn) or a recording domain ("pong": clips of
        the game recorded once into out/data-train and out/data-val, decoded from their MP4s, with the actions
        taken; the model forecasts under the domain's action words).
    clips / length: the training clips, world.sequences("all", clips, seed, length, split="train"): the clips the
        shipped predictor was trained on (3000 of 20 states); frames are world.render_state of each state. A
        recording domain: its train-split clips of `length` states.
    steps / batch_size: optimizer steps and windows per step (a window: context frames + rollout_steps targets
        from a random clip and start).
    rollout_steps: the loss is taken on this many autoregressive steps (the model's own frames fed back), so
        that it learns to continue from its own output and not only from perfect frames.
    object_weight: weight of the pixels that differ from the room (objects, screen, lamp) in the L1 + MSE loss
        (pipeline.training.renderer.reconstruction_loss); objects cover a few percent of a frame.
    eval_every / eval_clips: evaluation period (steps) and size (val-split clips: 8-frame rollouts from the first
        `context` frames).
    checkpoint_every: steps between atomic checkpoints.
    minutes: wall-clock cap of this session (0 = none; steps are the reproducible stop); the run ends cleanly.
    threads: torch intra-op threads (1 leaves the other core to everyone else).
    progress: draw a progress bar.
    model: the network's shape (models.pixel.PixelConfig).
    """

    out: str = "runs/pixel"
    domain: str = "shapes"
    seed: int = 0
    clips: int = 3000
    length: int = 20
    steps: int = 6000
    batch_size: int = 16
    rollout_steps: int = 2
    object_weight: float = 10.0
    eval_every: int = 250
    eval_clips: int = 32
    checkpoint_every: int = 100
    minutes: float = 0.0
    threads: int = 1
    progress: bool = True
    model: PixelConfig = field(default_factory=PixelConfig)

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = PixelConfig.from_dict(self.model)
        at_least_one = ("clips", "steps", "batch_size", "rollout_steps", "eval_every", "eval_clips",
                        "checkpoint_every", "threads")  # fmt: skip
        check_at_least(self, at_least_one, label=lambda name: "--" + name.replace("_", "-"), error=UserError)
        if self.length < self.model.context + self.rollout_steps:
            raise UserError(
                f"--length {self.length} is shorter than context {self.model.context} + rollout-steps "
                f"{self.rollout_steps}"
            )
        self.check_optimizer()
        if self.object_weight < 1:
            raise UserError(f"--object-weight must be >= 1, got {self.object_weight}")
        if self.minutes < 0:
            raise UserError(f"--minutes must be >= 0, got {self.minutes}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

"""The arguments of every trainer, one documented dataclass each (each field is a flag of its `semworld train`
command, derived by pipeline.cli.flags), and `args_from_recipe`, which turns a registered recipe of
models.presets into the arguments that make it."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from models.captioner import CaptionerConfig
from models.pixel import PixelConfig
from models.presets import STAGES, Recipe
from models.renderer import RendererConfig
from pipeline.utils import UserError

MODEL_KINDS = ("four_tensor", "baseline", "attentime_lm")
BOTH = ("four_tensor", "baseline")  # what --model both trains
RECALL_TARGETS = (
    "last",
    "novel",
)  # what the memory's recall term asks for (training.predictor.recall_targets)


# ---- the predictor (`semworld train predictor`) ----------------------------------------------------------
@dataclass
class TrainArgs:
    """Everything one predictor training run depends on (each field is a flag of `semworld train predictor`).

    data: a .jsonl state-sequence file ({"states": [...]} per line) or a ROCStories .csv.
    preset: a shape of models.presets (d_x, d_t, H, L, N, T); vocab_size and end_ids come from the tokenizer.
    out: output directory: best-epoch weights, tokenizer.json, training_summary.json, train_log.jsonl, loss_curve.png, checkpoint/last.pt.
    model: four_tensor, baseline, or both (into out/four_tensor and out/baseline, on the same windows).
    epochs: the epoch budget.
    batch_size: windows per optimizer step on each process.
    seed: seeds the split, the window cap, the initial weights, the shuffling and dropout.
    causal_slices: 4-tensor only, beyond the paper: slice t may not attend to later slices t' > t.
    attention: 4-tensor only: its joint attention, four_tensor (the paper's) or attentime (models/attentime.py).
    val_fraction: share of the sequences (whole stories) held out for validation.
    max_windows: cap on training windows, a seeded choice (validation is capped in proportion).
    lr: AdamW learning rate (paper: 3e-4).
    weight_decay: AdamW weight decay (paper: 0.01).
    dropout: the single residual-branch rate (paper: 0.1).
    patience: stopping rule: stop once this many epochs have passed since the minimum validation selection loss...
    tolerance: ...and the current one is above tolerance x that minimum (the 4-tensor paper's early stopping).
    min_frequency: words seen fewer times become [UNK].
    data_format: override the format the file extension implies (jsonl or rocstories).
    device: auto (cuda if available), cpu, cuda, cuda:1, ...
    threads: torch CPU threads per process (None: torch's default; small models on a busy machine run fastest on 1).
    progress: draw a progress bar.
    memory: 4-tensor only, beyond the paper: a tensor memory for what has left the window (docs/tensor-memory.md).
    mem_channels: memory channels C per cell.
    mem_shape: the memory grid D H W.
    chunk_size: tokens per memory step (16 = N: one step per state and layer).
    sigma_scale: multiplier on the write's softplus spread.
    memory_every_n_layers: layers l with l % n == 0 touch the memory.
    bptt_windows: a memory run trains batch_size // bptt_windows whole clips in order, back-propagating bptt_windows windows at a time.
    forget_bias: initial forget-gate bias of the memory (0: none).
    min_sigma: a floor on the memory writer's spread, in grid units (0: only a tiny epsilon).
    memory_gate_init: every memory layer's gate logit at init (-2: the gate starts at sigmoid(-2) = 0.12).
    memory_recall_weight: the weight of a loss asking the memory to spell the last state written (0: off).
        The window's last slice reads the incoming memory and, through the readout, must spell the sentence
        written just before the window.
    memory_recall_target: which sentence the recall term asks for: last (the one written just before the window)
        or novel (the latest one written that the window does not show again: hold it, not the fillers after it).
    memory_lr_scale: the memory's parameters train at lr x this.
    init_from: start from the weights of this saved predictor (a memory model may start from one without memory).
    grow_layer: with init_from, a saved 4-tensor model of one layer fewer: insert a new identity layer at this index.
        The saved layers from the index on move one down; the new layer's values and MLP output start at zero, so
        the grown model starts as the saved one (capacity added without losing what was learned).
    lr_schedule: constant (the paper's) or cosine: linear warmup over warmup_steps, then cosine decay to
        lr * min_lr_ratio at the last step of the epoch budget.
    warmup_steps: optimizer steps of linear warmup (cosine schedule only).
    min_lr_ratio: the cosine schedule's final learning rate as a share of lr.
    target_slices: 4-tensor only: all (the paper's window loss over S(1..T)) or last (only S(T), the one slot
        that is never visible to the window without --causal-slices; the stopping rule and the choice of epoch
        then use the validation L_S(T)).
    rollout_steps: 4-tensor only, scheduled sampling at the state level: windows carry K more states, and in a
        share rollout_prob of each batch the last k (1..K, drawn per batch) context states are the model's own
        rollout from the true states before them; the target stays the true state (needs --target-slices last).
        With memory the rollout starts from the clip's own window k before, with the memory as it was there
        (rollout_clip_windows).
    rollout_prob: the share of each batch trained on rolled-out contexts.
    min_history: beyond the paper: front-pad sequences so windows of only m true states train too (None: full only).
        The first T - m states of those windows are empty, as `Predictor.predict` lays out a history of m < T.
    """

    # what is trained, on what, into where
    data: str
    preset: str
    out: str
    model: str = "four_tensor"
    causal_slices: bool = False
    attention: str = "four_tensor"
    # the optimisation
    epochs: int = 30  # a budget: the stopping rule usually ends the run first
    batch_size: int = 32
    seed: int = 0
    lr: float = 3e-4  # the 4-tensor paper's AdamW settings and dropout
    weight_decay: float = 0.01  # paper: 0.01
    dropout: float = 0.1  # paper: 0.1
    # the data: split, cap, vocabulary
    val_fraction: float = 0.05
    max_windows: int | None = None
    min_frequency: int = 1
    data_format: str | None = None
    # the 4-tensor paper's early-stopping rule
    patience: int = 5
    tolerance: float = 1.01
    # the machine
    device: str = "auto"
    threads: int | None = None
    progress: bool = True
    # tensor memory (4-tensor only)
    memory: bool = False
    mem_channels: int = 16
    mem_shape: tuple[int, int, int] = (4, 4, 4)
    chunk_size: int = 16
    sigma_scale: float = 1.0
    memory_every_n_layers: int = 1
    bptt_windows: int = 8
    forget_bias: float = 0.0
    min_sigma: float = 0.0
    memory_gate_init: float = -2.0
    memory_recall_weight: float = 0.0
    memory_recall_target: str = "last"
    memory_lr_scale: float = 1.0
    init_from: str | None = None
    grow_layer: int | None = None
    # beyond the paper: schedule, loss slots, rollout-aware training (docs/training.md)
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.05
    target_slices: str = "all"
    rollout_steps: int = 0
    rollout_prob: float = 0.5
    min_history: int | None = None

    def __post_init__(self) -> None:
        if self.model not in (*MODEL_KINDS, "both"):
            raise UserError(f"--model {self.model!r}: expected four_tensor, baseline, attentime_lm or both")
        for name in ("epochs", "batch_size", "patience", "min_frequency"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"--threads must be a positive integer, got {self.threads}")
        if self.max_windows is not None and self.max_windows < 1:
            raise UserError(f"--max-windows must be a positive integer, got {self.max_windows}")
        if not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"--val-fraction must be in (0, 1), got {self.val_fraction}")
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.lr <= 0 or self.weight_decay < 0 or self.tolerance < 1.0:
            raise UserError(
                f"need lr > 0, weight_decay >= 0, tolerance >= 1; got {self.lr}, "
                f"{self.weight_decay}, {self.tolerance}"
            )
        if self.attention not in ("four_tensor", "attentime"):
            raise UserError(f"--attention {self.attention!r}: expected four_tensor or attentime")
        if self.attention != "four_tensor" and self.model != "four_tensor":
            raise UserError(
                f"--attention {self.attention} applies to --model four_tensor only, got {self.model}"
            )
        if self.causal_slices and self.model in ("baseline", "attentime_lm"):
            raise UserError(
                "--causal-slices applies to the 4-tensor model only (the baseline is causal already)"
            )
        if self.lr_schedule not in ("constant", "cosine"):
            raise UserError(f"--lr-schedule {self.lr_schedule!r}: expected constant or cosine")
        if self.warmup_steps < 0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise UserError(
                f"need --warmup-steps >= 0 and --min-lr-ratio in [0, 1], got {self.warmup_steps}, "
                f"{self.min_lr_ratio}"
            )
        if self.target_slices not in ("all", "last"):
            raise UserError(f"--target-slices {self.target_slices!r}: expected all or last")
        if self.rollout_steps < 0 or not 0.0 <= self.rollout_prob <= 1.0:
            raise UserError(
                f"need --rollout-steps >= 0 and --rollout-prob in [0, 1], got {self.rollout_steps}, "
                f"{self.rollout_prob}"
            )
        if self.min_history is not None and self.min_history < 1:
            raise UserError(f"--min-history must be >= 1, got {self.min_history}")
        if self.grow_layer is not None:
            if self.init_from is None or self.model != "four_tensor" or self.attention != "four_tensor":
                raise UserError(
                    "--grow-layer needs --init-from and the 4-tensor model with 4-tensor attention"
                )
            if self.grow_layer < 0:
                raise UserError(f"--grow-layer must be >= 0, got {self.grow_layer}")
        if self.target_slices != "all" and self.model != "four_tensor":
            raise UserError("--target-slices last applies to the 4-tensor model")
        if self.rollout_steps and self.target_slices != "last":
            raise UserError(
                "--rollout-steps needs --target-slices last (earlier slots of a rolled-out window "
                "would be trained on the model's own states)"
            )
        if self.memory:
            if self.model != "four_tensor":
                raise UserError(f"--memory applies to the 4-tensor model only, got --model {self.model}")
            if not self.memory_recall_weight >= 0:
                raise UserError(f"--memory-recall-weight must be >= 0, got {self.memory_recall_weight}")
            if self.memory_recall_target not in RECALL_TARGETS:
                raise UserError(
                    f"--memory-recall-target must be one of {', '.join(RECALL_TARGETS)}, "
                    f"got {self.memory_recall_target!r}"
                )
            if (
                isinstance(self.bptt_windows, bool)
                or not isinstance(self.bptt_windows, int)
                or self.bptt_windows < 1
            ):
                raise UserError(f"--bptt-windows must be a positive integer, got {self.bptt_windows!r}")
            try:
                self.memory_config(8)
            except ValueError as err:
                knob = str(err).split(".", 1)[-1].split(" ", 1)[0]
                raise UserError(f"--{knob.replace('_', '-')}: {err}") from None

    def memory_config(self, d: int) -> Any:
        """The TensorMemoryConfig of these knobs for tokens of width d, or None without --memory."""
        if not self.memory:
            return None
        from models.tensor_memory import TensorMemoryConfig

        shape = tuple(self.mem_shape)
        if len(shape) != 3:
            raise ValueError(
                f"TensorMemoryConfig.mem_shape must be three positive integers (D, H, W), got {shape}"
            )
        return TensorMemoryConfig(
            d_emb=d,
            mem_channels=self.mem_channels,
            mem_shape=(shape[0], shape[1], shape[2]),
            chunk_size=self.chunk_size,
            sigma_scale=self.sigma_scale,
            memory_every_n_layers=self.memory_every_n_layers,
            forget_bias=self.forget_bias,
            min_sigma=self.min_sigma,
            gate_init=self.memory_gate_init,
        )

    @property
    def clips_per_batch(self) -> int:
        """Clips stepped side by side by a memory run: batch_size windows per optimizer step in all."""
        return max(1, self.batch_size // self.bptt_windows)

    def fingerprint(self) -> dict[str, Any]:
        """The fields a resumed run must share with the checkpoint it resumes (not epochs, device, progress)."""
        d = asdict(self)
        for key in ("epochs", "device", "threads", "progress", "out"):
            d.pop(key)
        if self.attention == "four_tensor":  # the default: checkpoints from before the field still resume
            d.pop("attention")
        if self.init_from is None:
            d.pop("init_from")
        if self.grow_layer is None:
            d.pop("grow_layer")
        if self.min_history is None:  # runs from before the knob keep their fingerprint
            d.pop("min_history")
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key in (
            "lr_schedule",
            "warmup_steps",
            "min_lr_ratio",
            "target_slices",
            "rollout_steps",
            "rollout_prob",
        ):
            if d[key] == defaults[key]:  # runs with the paper's rule keep the fingerprint they had
                d.pop(key)
        if not self.memory:  # runs without memory keep the fingerprint they had before the memory knobs
            for key in (
                "memory",
                "mem_channels",
                "mem_shape",
                "chunk_size",
                "sigma_scale",
                "memory_every_n_layers",
                "bptt_windows",
                "forget_bias",
                "memory_lr_scale",
                "min_sigma",
                "memory_gate_init",
                "memory_recall_weight",
                "memory_recall_target",
            ):
                d.pop(key)
        else:
            d["mem_shape"] = list(self.mem_shape)
            # memory runs from before the knobs keep their fingerprint
            for key in ("min_sigma", "memory_gate_init", "memory_recall_weight", "memory_recall_target"):
                if d[key] == defaults[key]:
                    d.pop(key)
        d["data"] = str(Path(self.data).resolve())
        return d


# ---- the captioner (`semworld train captioner`) ----------------------------------------------------------
@dataclass
class TrainCaptionerArgs:
    """Arguments of `semworld train captioner` (every field is a flag: --out, --epochs, --steps-per-epoch, ...).

    out: directory for the final model in the Hugging Face layout (config.json, model.safetensors, processor
        and tokenizer files); it is written when the run ends, holding the best evaluated weights.
    run_dir: checkpoints (checkpoint.pt, written atomically each epoch) and the JSON-lines log (log.jsonl);
        a run started again with the same run_dir resumes from its checkpoint.
    seed: seeds the model initialisation, every epoch's frames (seed, epoch) and the held-out set.
    epochs / steps_per_epoch / batch_size: fresh random frames every step, so an epoch is just a unit of
        evaluation and checkpointing; epochs * steps_per_epoch * batch_size frames are seen in all.
    lr / min_lr_ratio / warmup_steps / weight_decay / grad_clip: AdamW with linear warmup and cosine decay to
        lr * min_lr_ratio.
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
        long plateau. Used when the ViT grid equals the world's (image_size / patch_size == 5); 0 turns it off.
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
    # AdamW: linear warmup, then cosine decay to lr * min_lr_ratio
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
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
        for name in ("epochs", "steps_per_epoch", "batch_size", "eval_frames", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError(f"target must be in (0, 1] or None, got {self.target}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        for name in ("degrade_prob", "rescale_prob", "noise_prob", "jitter_prob", "resize_prob"):
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
class TrainRendererArgs:
    """Arguments of `semworld train renderer` (each field is a flag: --out, --vae-steps, ...).

    out: run directory: checkpoint.pt (atomic, resumable), log.jsonl, strips/*.png (truth | render) and, when
        the run ends, pipeline/ (the diffusers checkpoint, save_pretrained with safetensors).
    image_size: side of the frames the model draws (the world renders them at this size). 80 with a VAE that
        downsamples 16x gives a 5 x 5 latent: one latent pixel per cell of the world's 5 x 5 grid, which makes
        the UNet ~6x cheaper per sample than 16 x 16 latents (the shipped captioner reads frames at 64 anyway).
    output_size: side of the frames the Renderer adapter hands out (resized from image_size; 128 = the world's).
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
    pool: number of distinct training scenes whose latents are cached (drawn once, seeded).
    eval_every, eval_states: evaluation period (steps) and size (states drawn at each evaluation).
    eval_set: what the evaluations draw, and so what `best/` is chosen by: "test" (eval_states distinct states of
        test-split world clips, mostly 1-2 objects) or "varied" (the six states without objects and
        eval_states // 3 distinct random scenes each of 1, 2 and 3 objects; round trip by object count logged).
    ema_decay: in stage 2, keep an exponential moving average of the trained weights with this decay
        (diffusers' EMAModel, warmed up as (1 + step) / (10 + step)); evaluations, best/ and pipeline/ use the
        average. 0 = off. With the pixel loss, single checkpoints' round trips swing by 10-30 points.
    init_from: a saved renderer folder (e.g. weights/renderer): stage 2 starts from its VAE, UNet and text
        encoder and the VAE stage is skipped (a fine-tune); its networks must have the shapes these arguments
        give.
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
    guidance: float = 1.0
    pool: int = 8000
    eval_every: int = 250
    eval_states: int = 64
    eval_set: str = "test"
    ema_decay: float = 0.0
    init_from: str | None = None
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
        for name in ("vae_steps", "unet_steps", "decoder_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "vae_batch",
            "unet_batch",
            "sample_steps",
            "eval_every",
            "eval_states",
            "checkpoint_every",
            "threads",
            "pool",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def model_config(self) -> RendererConfig:
        """The network's shape among these arguments."""
        return RendererConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RendererConfig)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- the pixel-space baseline (`semworld train pixel`) ----------------------------------------------------
@dataclass
class TrainPixelArgs:
    """Arguments of `semworld train pixel` (each field is a flag: --out, --steps, --batch-size, ...).

    out: run directory: checkpoint.pt (atomic, resumable: rerun the same command), log.jsonl, loss_curve.png,
        training_summary.json and model/ (config.json + model.safetensors, rewritten at every evaluation).
    seed: seeds the initialisation and every step's batch (step s draws from (seed, s), so a resumed run sees
        the batches an uninterrupted one would).
    clips / length: the training clips, world.sequences("all", clips, seed, length, split="train"): the clips the
        shipped predictor was trained on (3000 of 20 states); frames are world.render_state of each state.
    steps / batch_size: optimizer steps and windows per step (a window: context frames + rollout_steps targets
        from a random clip and start).
    rollout_steps: the loss is taken on this many autoregressive steps (the model's own frames fed back), so
        that it learns to continue from its own output and not only from perfect frames.
    lr / min_lr_ratio / warmup_steps / weight_decay / grad_clip: AdamW, linear warmup, cosine decay over `steps`
        to lr * min_lr_ratio.
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
    seed: int = 0
    clips: int = 3000
    length: int = 20
    steps: int = 6000
    batch_size: int = 16
    rollout_steps: int = 2
    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
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
        for name in ("clips", "steps", "batch_size", "rollout_steps", "eval_every", "eval_clips",
                     "checkpoint_every", "threads"):  # fmt: skip
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.length < self.model.context + self.rollout_steps:
            raise UserError(
                f"--length {self.length} is shorter than context {self.model.context} + rollout-steps "
                f"{self.rollout_steps}"
            )
        if self.lr <= 0 or not 0 < self.min_lr_ratio <= 1:
            raise UserError(
                f"--lr must be > 0 and --min-lr-ratio in (0, 1], got {self.lr}, {self.min_lr_ratio}"
            )
        if self.object_weight < 1:
            raise UserError(f"--object-weight must be >= 1, got {self.object_weight}")
        if self.minutes < 0 or self.warmup_steps < 0 or self.grad_clip <= 0:
            raise UserError("--minutes and --warmup-steps must be >= 0 and --grad-clip > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- every stage (`semworld train all`, `make weights`) -------------------------------------------------
@dataclass
class TrainAllArgs:
    """What `semworld train all` (and `make weights`) rebuilds.

    out: the weights folder (captioner/, renderer/, predictor/, model_index.json).
    run_dir: checkpoints and logs of each stage (run_dir/<stage>/), from which a rerun resumes.
    seed: every stage's seed.
    stages: which stages to (re)build, of captioner, renderer, predictor; the others are left as they are.
    threads: torch CPU threads per stage.
    device: the predictor's device (auto, cpu, cuda).
    quick: tiny budgets, the "quick-*" recipes: a smoke test of the whole path, not shippable weights.
    progress: draw progress bars.
    domain: the domain whose recipe chain to run, named in model_index.json ("<domain>-<stage>" recipes).
    """

    out: str = "weights"
    run_dir: str = "runs/weights"
    seed: int = 0
    stages: tuple[str, ...] = STAGES
    threads: int = 1
    device: str = "auto"
    quick: bool = False
    progress: bool = True
    domain: str = "shapes"

    def __post_init__(self) -> None:
        self.stages = tuple(s.strip() for part in self.stages for s in part.split(",") if s.strip())
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise UserError(
                f"--stages: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(STAGES)}"
            )
        if self.threads < 1 or self.seed < 0:
            raise UserError(f"--threads must be >= 1 and --seed >= 0, got {self.threads}, {self.seed}")


TrainStageArgs = TrainCaptionerArgs | TrainRendererArgs | TrainArgs


def args_from_recipe(recipe: Recipe, **run: Any) -> TrainStageArgs:
    """The training arguments that make `recipe`; `run` adds the fields that depend on where and how it runs
    (out, run_dir, seed, threads, device, data, captioner, init_from, ...). The recipe's seed_offset is added to
    the run's seed."""
    if "seed" in run:
        run = {**run, "seed": run["seed"] + recipe.seed_offset}
    if recipe.stage == "captioner":
        assert isinstance(recipe.model, CaptionerConfig)
        return TrainCaptionerArgs(model=recipe.model, **{**recipe.train, **run})
    if recipe.stage == "renderer":
        assert isinstance(recipe.model, RendererConfig)
        return TrainRendererArgs(**{**recipe.model.to_dict(), **recipe.train, **run})
    return TrainArgs(preset=str(recipe.model), **{**recipe.train, **run})

"""The arguments of the predictor trainer and of `train all`, documented dataclasses (each field is a flag of its
`semworld train` command, derived by pipeline.cli.flags), and `args_from_recipe`, which turns a registered recipe
of models.presets into the arguments that make it (the image trainers' arguments: pipeline.training.image_args)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from models.captioner import CaptionerConfig
from models.presets import STAGES, Recipe, get_preset
from models.renderer import RendererConfig
from models.tensor_memory import TensorMemoryConfig
from pipeline.training.image_args import TrainCaptionerArgs, TrainRendererArgs
from pipeline.utils import UserError

MODEL_KINDS = ("four_tensor", "baseline", "attentime_lm")
BOTH = ("four_tensor", "baseline")  # what --model both trains
RECALL_TARGETS = (
    "last",
    "novel",
)  # what the memory's recall term asks for (training.predictor.recall_targets)
# The memory's knobs are flags under their TensorMemoryConfig names (--mem-channels, ...) but for these, which
# would be unclear beside the training's own flags; the flat args of older runs (a checkpoint's fingerprint, a
# training_summary.json) name them the same way.
MEMORY_FLAG_NAMES = {"gate_init": "memory_gate_init", "compile": "memory_compile"}


def preset_shape(preset: str) -> dict[str, int]:
    """(vocab_size, d_x, d_t, n_heads, n_layers, N, T) of a named preset; unknown names -> UserError."""
    try:
        return get_preset(preset).shape()
    except ValueError as err:
        raise UserError(f"--preset: {err}") from None


def memory_knobs(config: TensorMemoryConfig) -> dict[str, Any]:
    """The knobs of config under their flag names, without d_emb (the preset's d_x * d_t)."""
    return {MEMORY_FLAG_NAMES.get(k, k): v for k, v in config.to_dict().items() if k != "d_emb"}


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
    memory: 4-tensor only, beyond the paper: a tensor memory for what has left the window (docs/tensor-memory.md),
        shaped by the flags that follow (the knobs of models.tensor_memory.TensorMemoryConfig; its d_emb is the
        preset's d_x * d_t). The field holds that config or None; a dict of knobs is completed into the config.
    bptt_windows: a memory run trains batch_size // bptt_windows whole clips in order, back-propagating bptt_windows windows at a time.
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
    # tensor memory (4-tensor only): the memory's config, and how a memory run trains
    memory: TensorMemoryConfig | None = None
    bptt_windows: int = 8
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
        if self.grow_layer is not None:
            if self.init_from is None or self.model != "four_tensor" or self.attention != "four_tensor":
                raise UserError(
                    "--grow-layer needs --init-from and the 4-tensor model with 4-tensor attention"
                )
            if self.grow_layer < 0:
                raise UserError(f"--grow-layer must be >= 0, got {self.grow_layer}")
        self._check_schedule()
        if self.memory is not None:
            self._check_memory()

    def _check_schedule(self) -> None:
        """Check the arguments beyond the paper: the schedule, the loss slots, rollout-aware training."""
        if self.lr_schedule not in ("constant", "cosine"):
            raise UserError(f"--lr-schedule {self.lr_schedule!r}: expected constant or cosine")
        self._check_steps_and_share("warmup_steps", "min_lr_ratio")
        if self.target_slices not in ("all", "last"):
            raise UserError(f"--target-slices {self.target_slices!r}: expected all or last")
        self._check_steps_and_share("rollout_steps", "rollout_prob")
        if self.min_history is not None and self.min_history < 1:
            raise UserError(f"--min-history must be >= 1, got {self.min_history}")
        if self.target_slices != "all" and self.model != "four_tensor":
            raise UserError("--target-slices last applies to the 4-tensor model")
        if self.rollout_steps and self.target_slices != "last":
            raise UserError(
                "--rollout-steps needs --target-slices last (earlier slots of a rolled-out window "
                "would be trained on the model's own states)"
            )

    def _check_steps_and_share(self, steps: str, share: str) -> None:
        """A count of steps (>= 0) and the share in [0, 1] that goes with it, refused together by their flags."""
        count, part = getattr(self, steps), getattr(self, share)
        if count < 0 or not 0.0 <= part <= 1.0:
            raise UserError(
                f"need --{steps.replace('_', '-')} >= 0 and --{share.replace('_', '-')} in [0, 1], "
                f"got {count}, {part}"
            )

    def _check_memory(self) -> None:
        """Build the memory's config from a dict of knobs (d_emb: the preset's d_x * d_t) and check the memory
        run's arguments; a bad knob is refused by its flag."""
        shape = preset_shape(self.preset)
        d = shape["d_x"] * shape["d_t"]
        if isinstance(self.memory, Mapping):
            try:
                self.memory = TensorMemoryConfig.from_dict({"d_emb": d, **self.memory})
            except ValueError as err:  # named by the knob's flag, or by --memory for an unknown knob
                knob = re.match(r"TensorMemoryConfig\.(\w+)", str(err))
                flag = MEMORY_FLAG_NAMES.get(knob[1], knob[1]) if knob else "memory"
                raise UserError(f"--{flag.replace('_', '-')}: {err}") from None
        if not isinstance(self.memory, TensorMemoryConfig) or self.memory.d_emb != d:
            raise UserError(
                f"--memory: expected None, a dict of TensorMemoryConfig's knobs or a TensorMemoryConfig with d_emb "
                f"= d_x * d_t = {d} of --preset {self.preset}, got {self.memory!r}"
            )
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
        if self.memory is None:  # runs without memory keep the fingerprint they had before the memory knobs
            for key in (
                "memory",
                "bptt_windows",
                "memory_lr_scale",
                "memory_recall_weight",
                "memory_recall_target",
            ):
                d.pop(key)
        else:  # the knobs flat, as they were before they were one config
            defaults |= memory_knobs(TensorMemoryConfig(d_emb=self.memory.d_emb))
            d.update(memory=True, **memory_knobs(self.memory))
            # memory runs from before the later knobs keep their fingerprint
            for key in ("min_sigma", "memory_gate_init", "initial_sigma_bias", "memory_compile",
                        "memory_recall_weight", "memory_recall_target"):  # fmt: skip
                if d[key] == defaults[key]:
                    d.pop(key)
        d["data"] = str(Path(self.data).resolve())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainArgs:
        """The arguments asdict wrote (training_summary.json's "args"), also in the flat format of older runs:
        memory a bool, and its knobs fields of their own under their flag names."""
        d = dict(d)
        if isinstance(d.get("memory"), bool):
            knob_of = {flat: knob for knob, flat in MEMORY_FLAG_NAMES.items()}
            knobs = {f.name for f in dataclasses.fields(TensorMemoryConfig)} - {"d_emb"}
            flat = {knob_of.get(k, k): d.pop(k) for k in list(d) if knob_of.get(k, k) in knobs}
            d["memory"] = flat if d["memory"] else None
        return cls(**d)


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

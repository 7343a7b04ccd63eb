"""Training and evaluation of the predictors: a plain, seeded loop with the section 8.2 stopping rule.

Owns `TrainArgs`, the epoch loop (single process or torchrun/DDP), checkpoint-and-resume, the per-epoch
JSON-lines log, the L_S(T) plot, and `evaluate` (the metrics `semworld eval predictor` prints).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from pipeline.data import (
    WindowSet,
    cap_windows,
    make_windows,
    read_sequences,
    split_sequences,
    uniform_cross_entropy,
)
from pipeline.tokenizer import StateTokenizer
from pipeline.utils import UserError

logger = logging.getLogger(__name__)

MODEL_KINDS = ("four_tensor", "baseline")
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "last.pt"
LOG_FILE = "train_log.jsonl"
CURVE_FILE = "loss_curve.png"
BOTH_CURVE_FILE = "loss_curves.png"
SUMMARY_FILE = "training_summary.json"
PARAM_HASH_ENV = "SEMWORLD_PARAM_HASH_FILE"  # when set, each rank writes a hash of its final parameters there
LABELS = {"four_tensor": "4-tensor", "baseline": "1-D baseline"}


class PredictorModel(Protocol):
    """The shared predictor interface (models.four_tensor and models.baseline), as the pipeline uses it."""

    config: Any
    training: bool

    def training_step(self, token_ids_full: torch.Tensor) -> torch.Tensor: ...
    def score(self, token_ids_full: torch.Tensor) -> dict[str, float]: ...
    def predict_next(
        self, token_ids: torch.Tensor, state: object | None = None
    ) -> tuple[torch.Tensor, object | None]: ...
    def save_pretrained(self, directory: str | Path) -> None: ...


# ---- arguments -----------------------------------------------------------------------------------------
@dataclass
class TrainArgs:
    """Everything one training run depends on (the CLI flags of `semworld train predictor`).

    data: a .jsonl state-sequence file or a ROCStories .csv. data_format: override the format the extension
    implies ("jsonl" | "rocstories"). preset: a name of models.presets (fixes d_x, d_t, H, L, N, T; vocab_size
    and end_ids come from the tokenizer). out: the output directory (weights of the best epoch, tokenizer.json,
    training_summary.json, train_log.jsonl, loss_curve.png, checkpoint/last.pt). model: "four_tensor",
    "baseline", or "both" (into out/four_tensor and out/baseline, on the same windows). epochs: the epoch
    budget. batch_size: windows per optimizer step on each process. seed: seeds the split, the window cap, the
    initial weights, the shuffling and dropout. causal_slices: the 4-tensor model masks keys of later sentence
    slices (t' > t), beyond the paper. val_fraction: share of the sequences (whole stories) held out for
    validation. max_windows: cap on training windows (validation is capped in proportion). lr, weight_decay:
    AdamW (paper: 3e-4, 0.01). dropout: the single residual-branch rate (paper: 0.1). patience, tolerance: the
    stopping rule (stop once >= patience epochs have passed since the minimum validation selection loss and the
    current one is above tolerance x that minimum). min_frequency: words seen fewer times become [UNK].
    device: "auto" (cuda if available), "cpu", "cuda", "cuda:1", ... threads: torch CPU threads per process
    (None: torch's default; small models on a busy machine run fastest on 1). progress: draw a tqdm bar.

    Tensor memory (4-tensor only, docs/tensor-memory.md): memory turns it on; mem_channels, mem_shape (D, H, W),
    chunk_size, sigma_scale, memory_every_n_layers are its knobs (models/tensor_memory.py). A memory model
    trains on whole clips in order: batch_size // bptt_windows clips at a time, each stepped window by window with
    (h, c) carried; the loss of bptt_windows consecutive windows is back-propagated together (one optimizer
    step, batch_size windows as without memory), then the state is detached and carried on. forget_bias and
    memory_lr_scale: the memory's initial forget-gate bias and a learning-rate multiplier for its parameters.
    init_from: start from the weights of a saved 4-tensor predictor of the same shape (a memory model may start
    from one without memory: its memory keeps its fresh initialisation).
    """

    data: str
    preset: str
    out: str
    model: str = "four_tensor"
    epochs: int = 30
    batch_size: int = 32
    seed: int = 0
    causal_slices: bool = False
    val_fraction: float = 0.05
    max_windows: int | None = None
    lr: float = 3e-4
    weight_decay: float = 0.01
    dropout: float = 0.1
    patience: int = 5
    tolerance: float = 1.01
    min_frequency: int = 1
    data_format: str | None = None
    device: str = "auto"
    threads: int | None = None
    progress: bool = True
    memory: bool = False
    mem_channels: int = 16
    mem_shape: tuple[int, int, int] = (4, 4, 4)
    chunk_size: int = 16
    sigma_scale: float = 1.0
    memory_every_n_layers: int = 1
    bptt_windows: int = 8
    forget_bias: float = 0.0
    memory_lr_scale: float = 1.0
    init_from: str | None = None

    def __post_init__(self) -> None:
        if self.model not in (*MODEL_KINDS, "both"):
            raise UserError(f"--model {self.model!r}: expected four_tensor, baseline or both")
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
        if self.memory:
            if self.model != "four_tensor":
                raise UserError(f"--memory applies to the 4-tensor model only, got --model {self.model}")
            if isinstance(self.bptt_windows, bool) or not isinstance(self.bptt_windows, int) or self.bptt_windows < 1:
                raise UserError(f"--bptt-windows must be a positive integer, got {self.bptt_windows!r}")
            try:
                self.memory_config(8)
            except ValueError as err:
                knob = str(err).split(".", 1)[-1].split(" ", 1)[0]
                raise UserError(f"--{knob.replace('_', '-')}: {err}") from None
        if self.causal_slices and self.model == "baseline":
            raise UserError(
                "--causal-slices applies to the 4-tensor model only (the baseline is causal already)"
            )

    def memory_config(self, d: int) -> Any:
        """The TensorMemoryConfig of these knobs for tokens of width d, or None without --memory."""
        if not self.memory:
            return None
        from models.tensor_memory import TensorMemoryConfig

        return TensorMemoryConfig(
            d_emb=d, mem_channels=self.mem_channels, mem_shape=(self.mem_shape[0], self.mem_shape[1], self.mem_shape[2]), chunk_size=self.chunk_size,
            sigma_scale=self.sigma_scale, memory_every_n_layers=self.memory_every_n_layers,
            forget_bias=self.forget_bias,
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
        if self.init_from is None:
            d.pop("init_from")
        if not self.memory:  # runs without memory keep the fingerprint they had before the memory knobs
            for key in ("memory", "mem_channels", "mem_shape", "chunk_size", "sigma_scale",
                        "memory_every_n_layers", "bptt_windows", "forget_bias", "memory_lr_scale"):
                d.pop(key)
        else:
            d["mem_shape"] = list(self.mem_shape)
        d["data"] = str(Path(self.data).resolve())
        return d


# ---- the stopping rule (section 8.2) ------------------------------------------------------------------
@dataclass(frozen=True)
class StopDecision:
    stop: bool
    reason: str  # "rule", "budget" or "" (keep going)
    best_epoch: int  # zero-based index of the first minimum of the validation selection loss


def stop_decision(
    val_losses: list[float], epoch_budget: int, patience: int = 5, tolerance: float = 1.01
) -> StopDecision:
    """Decide after the last epoch of `val_losses` (one per finished epoch) whether training ends.

    Stop when at least `patience` epochs have passed since the minimum and the latest loss is above
    `tolerance` times that minimum, or when `epoch_budget` epochs are done. The selected checkpoint is the epoch
    of the minimum (the first one, on ties).
    """
    if not val_losses:
        raise ValueError("stop_decision needs at least one finished epoch")
    best = min(range(len(val_losses)), key=lambda i: (val_losses[i], i))
    last = len(val_losses) - 1
    if last - best >= patience and val_losses[last] > tolerance * val_losses[best]:
        return StopDecision(True, "rule", best)
    if len(val_losses) >= epoch_budget:
        return StopDecision(True, "budget", best)
    return StopDecision(False, "", best)


# ---- processes and devices -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(spec: str = "auto", local_rank: int = 0) -> torch.device:
    """'auto' -> cuda (this process's local rank) if available, else cpu; otherwise the named device."""
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise UserError(f"--device {spec!r}: {err}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {spec}: CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", local_rank)
    return device


def init_distributed(device_spec: str) -> DistContext:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, nccl on CUDA)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_spec, local_rank)
    if world_size <= 1:
        return DistContext(device=device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend=backend)
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device)


def set_determinism(device: torch.device) -> None:
    """Deterministic kernels everywhere (cuBLAS needs its workspace setting before first use)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    # One RNG stream per (run, epoch, process): dropout masks do not depend on what ran before an epoch, so a
    # resumed run (any number of processes) draws exactly what an uninterrupted one draws.
    return (seed * 1_000_003 + epoch * 1_009 + rank) % (2**63 - 1)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- data ----------------------------------------------------------------------------------------------
@dataclass
class PreparedData:
    tokenizer: StateTokenizer
    train: WindowSet
    val: WindowSet
    T: int
    N: int
    stats: dict[str, Any]


def preset_shape(preset: str) -> dict[str, int]:
    """(d_x, d_t, n_heads, n_layers, N, T, vocab_size) of a named preset; unknown names -> UserError."""
    from models import presets

    try:
        cfg = (
            presets.from_name(preset) if hasattr(presets, "from_name") else presets.four_tensor_config(preset)
        )
    except ValueError as err:
        raise UserError(f"--preset: {err}") from None
    return {k: getattr(cfg, k) for k in ("vocab_size", "d_x", "d_t", "n_heads", "n_layers", "N", "T")}


def val_window_cap(max_windows: int, val_fraction: float) -> int:
    """Validation windows kept when training windows are capped at max_windows (the same proportion)."""
    return max(1, math.ceil(max_windows * val_fraction / (1.0 - val_fraction)))


def prepare_data(args: TrainArgs, tokenizer: StateTokenizer | None = None) -> PreparedData:
    """Read, split by story (seeded), build the tokenizer over all sequences (as the paper does), make windows."""
    shape = preset_shape(args.preset)
    T, N = shape["T"], shape["N"]
    sequences = read_sequences(args.data, args.data_format)
    split = split_sequences(sequences, args.val_fraction, seed=args.seed)
    if tokenizer is None:
        tokenizer = StateTokenizer.build((s for seq in sequences for s in seq.states), args.min_frequency)
    train = make_windows(split.train, tokenizer, T, N)
    val = make_windows(split.val, tokenizer, T, N)
    full_train, full_val = len(train), len(val)
    if args.max_windows is not None and args.memory:  # whole clips, for the memory's in-order training
        train = cap_clips(train, args.max_windows, args.seed)
        val = cap_clips(val, val_window_cap(args.max_windows, args.val_fraction), args.seed + 1)
    elif args.max_windows is not None:
        train = cap_windows(train, args.max_windows, args.seed)
        val = cap_windows(val, val_window_cap(args.max_windows, args.val_fraction), args.seed + 1)
    if len(train) == 0 or len(val) == 0:
        raise UserError(
            f"{args.data}: no training or validation windows ({len(train)} / {len(val)}); every "
            f"sequence needs at least T+1={T + 1} states, and there must be enough sequences to split"
        )
    stats = {
        "sequences": len(sequences),
        "train_sequences": len(split.train),
        "val_sequences": len(split.val),
        "train_windows": len(train),
        "val_windows": len(val),
        "train_windows_before_cap": full_train,
        "val_windows_before_cap": full_val,
        "pad_fraction": round(float((torch.cat([train.ids, val.ids]) == 0).float().mean()), 4),
        "states": train.states + val.states,
        "truncated_sentences": train.truncated + val.truncated,
        "skipped_sequences": train.skipped + val.skipped,
        "vocab_size": tokenizer.vocab_size,
        "T": T,
        "N": N,
    }
    logger.info(
        "data: %d sequences -> %d train / %d val windows, pad fraction %.4f, %d of %d states truncated "
        "at N=%d, vocabulary %d",
        stats["sequences"],
        len(train),
        len(val),
        stats["pad_fraction"],
        stats["truncated_sentences"],
        stats["states"],
        N,
        tokenizer.vocab_size,
    )
    return PreparedData(tokenizer, train, val, T, N, stats)


# ---- models --------------------------------------------------------------------------------------------
def build_model(
    kind: str, preset: str, tokenizer: StateTokenizer, dropout: float = 0.1, causal_slices: bool = False,
    memory: Any = None,
) -> Any:
    """A fresh predictor of `kind` shaped by `preset`, with vocab_size and end_ids from the tokenizer; memory:
    a TensorMemoryConfig for the 4-tensor model (None: no memory)."""
    from models import presets

    overrides: dict[str, Any] = {
        "vocab_size": tokenizer.vocab_size,
        "end_ids": tokenizer.end_ids,
        "dropout": dropout,
    }
    if memory is not None:
        overrides["memory"] = memory
    if causal_slices:
        from dataclasses import fields

        from models.four_tensor import FourTensorConfig

        names = {f.name for f in fields(FourTensorConfig)}
        overrides["causal_slices" if "causal_slices" in names else "slice_causal"] = True
    make = presets.from_name if hasattr(presets, "from_name") else presets.four_tensor_config
    cfg = make(preset, **overrides)
    if kind == "four_tensor":
        from models.four_tensor import FourTensorModel

        return FourTensorModel(cfg)
    if kind == "baseline":
        from models.baseline import BaselineConfig, BaselineModel

        return BaselineModel(BaselineConfig.from_predictor(cfg))
    raise ValueError(f"model kind must be one of {MODEL_KINDS}, got {kind!r}")


class _StepModule(nn.Module):
    """forward = training_step, so DistributedDataParallel's hooks see the loss computation."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, token_ids_full: torch.Tensor) -> torch.Tensor:
        return self.model.training_step(token_ids_full)


class _SegmentModule(nn.Module):
    """forward = a memory model's loss over consecutive windows of a batch of clips, state carried (one DDP
    forward per backward)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, windows: torch.Tensor, lengths: list[int], state: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """windows (B, K, T+1, N) of B clips sorted by lengths (windows left in each, descending), state (h, c)
        for the B rows or None -> summed CE, target count, and the state after the last window of each row."""
        from models.tensor_memory import MemoryState

        loss_sum = windows.new_zeros((), dtype=torch.float32)
        count = windows.new_zeros(())
        for j in range(windows.shape[1]):
            n = sum(1 for L in lengths if L > j)  # rows still running: a prefix, the rows are sorted
            if n == 0:
                break
            st = None if state is None else MemoryState(state.h[:n], state.c[:n])
            ls, cnt, st = self.model.window_loss(windows[:n, j], st)
            loss_sum, count = loss_sum + ls, count + cnt
            state = st if state is None or n == state.h.shape[0] else MemoryState(
                torch.cat([st.h, state.h[n:]]), torch.cat([st.c, state.c[n:]]))
        return loss_sum, count, state


def clip_windows(windows: WindowSet) -> list[torch.Tensor]:
    """The windows of each sequence, in order: a list of (n_windows, T+1, N), one per sequence with windows."""
    by_seq: dict[int, list[tuple[int, int]]] = {}
    for row, (seq, start) in enumerate(zip(windows.sequence_index.tolist(), windows.start.tolist())):
        by_seq.setdefault(seq, []).append((start, row))
    return [windows.ids[[r for _, r in sorted(rows)]] for _, rows in sorted(by_seq.items())]


def cap_clips(windows: WindowSet, limit: int | None, seed: int) -> WindowSet:
    """At most about `limit` windows made of whole sequences, chosen with a seeded generator (order kept)."""
    if limit is None or len(windows) <= limit:
        return windows
    g = torch.Generator().manual_seed(seed)
    seqs = torch.unique(windows.sequence_index)
    keep_seqs: list[int] = []
    total = 0
    for k in torch.randperm(len(seqs), generator=g).tolist():
        if total >= limit:
            break
        keep_seqs.append(int(seqs[k]))
        total += int((windows.sequence_index == seqs[k]).sum())
    keep = torch.isin(windows.sequence_index, torch.tensor(keep_seqs)).nonzero().squeeze(1)
    return windows.subset(keep)


def _stack_clips(group: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """Clips (n_i, T+1, N), longest first -> (B, max n_i, T+1, N) zero-padded at the end, and the n_i."""
    group = sorted(group, key=lambda w: -w.shape[0])
    lengths = [w.shape[0] for w in group]
    out = group[0].new_zeros(len(group), lengths[0], *group[0].shape[1:])
    for b, w in enumerate(group):
        out[b, : w.shape[0]] = w
    return out, lengths


def train_clip_batch(
    step_module: nn.Module, optimizer: torch.optim.Optimizer, group: list[torch.Tensor], bptt_windows: int,
    device: torch.device | str,
) -> tuple[float, int]:
    """Train a memory model on a batch of whole clips, in order, with truncated back-propagation: (h, c) is
    carried from window to window; every bptt_windows windows the summed loss is back-propagated (mean over
    the targets), the optimizer steps and the state is detached. Returns (sum of segment losses x windows,
    windows)."""
    windows, lengths = _stack_clips(group)
    windows = windows.to(device)
    state = None
    loss_total, seen = 0.0, 0
    for j in range(0, windows.shape[1], bptt_windows):
        part = [max(0, min(L - j, bptt_windows)) for L in lengths]
        loss_sum, count, state = step_module(windows[:, j : j + bptt_windows], part, state)
        loss = loss_sum / count.clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        state = state.detach()  # truncation: no gradient into earlier segments, the state itself carries on
        loss_total += float(loss.detach()) * sum(part)
        seen += sum(part)
    return loss_total, seen


def init_weights(model: Any, directory: str | Path) -> None:
    """Copy the weights of a saved predictor into model; the memory's own weights may be absent (fresh)."""
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"--init-from {directory}: no model.safetensors there")
    saved = load_file(str(path))
    own = model.state_dict()
    missing = sorted(k for k in own if k not in saved and not k.startswith(("memory.", "memory_taps.")))
    extra = sorted(k for k in saved if k not in own)
    bad = sorted(k for k in saved if k in own and saved[k].shape != own[k].shape)
    if missing or extra or bad:
        raise UserError(f"--init-from {directory}: weights do not fit this model (missing {missing[:3]}, "
                        f"unexpected {extra[:3]}, other shapes {bad[:3]})")
    nn.Module.load_state_dict(model, {**own, **saved})


def parameter_groups(model: nn.Module, args: TrainArgs) -> list[dict[str, Any]]:
    """One AdamW group, or with --memory-lr-scale != 1 a second group for the memory (interface and taps) at
    lr * memory_lr_scale."""
    params = list(model.named_parameters())
    if not args.memory or args.memory_lr_scale == 1.0:
        return [{"params": [p for _, p in params]}]
    is_mem = lambda name: name.startswith(("memory.", "memory_taps."))  # noqa: E731
    return [{"params": [p for n, p in params if not is_mem(n)]},
            {"params": [p for n, p in params if is_mem(n)], "lr": args.lr * args.memory_lr_scale}]


def parameter_hash(model: nn.Module) -> str:
    """sha256 over every parameter and buffer, in name order (replica-equality checks)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# ---- evaluation ----------------------------------------------------------------------------------------
SCORE_KEYS = (
    "selection_loss_sum",
    "selection_count",
    "last_ce_sum",
    "last_tokens",
    "last_correct",
    "exact_sentences",
    "sentences",
)


@torch.no_grad()
def evaluate(
    model: Any, windows: torch.Tensor, batch_size: int = 64, device: torch.device | str = "cpu"
) -> dict[str, float]:
    """Score windows (W, T+1, N): selection loss, L_S(T), token and exact-sentence accuracy, and the counts."""
    was_training = model.training
    model.eval()
    sums = dict.fromkeys(SCORE_KEYS, 0.0)
    for i in range(0, windows.shape[0], batch_size):
        part = model.score(windows[i : i + batch_size].to(device))
        for key in SCORE_KEYS:
            sums[key] += float(part[key])
    model.train(was_training)
    return {
        "selection_loss": sums["selection_loss_sum"] / max(sums["selection_count"], 1.0),
        "last_ce": sums["last_ce_sum"] / max(sums["last_tokens"], 1.0),
        "token_acc": sums["last_correct"] / max(sums["last_tokens"], 1.0),
        "exact_acc": sums["exact_sentences"] / max(sums["sentences"], 1.0),
        "last_tokens": int(sums["last_tokens"]),
        "sentences": int(sums["sentences"]),
    }


@torch.no_grad()
def evaluate_clips(
    model: Any, clips: list[torch.Tensor], batch_size: int = 64, device: torch.device | str = "cpu"
) -> dict[str, float]:
    """evaluate() for a memory model: the windows of each clip (n_i, T+1, N) scored in order, (h, c) carried."""
    from models.tensor_memory import MemoryState

    was_training = model.training
    model.eval()
    sums = dict.fromkeys(SCORE_KEYS, 0.0)
    for i in range(0, len(clips), batch_size):
        windows, lengths = _stack_clips(clips[i : i + batch_size])
        windows = windows.to(device)
        state = None
        for j in range(windows.shape[1]):
            n = sum(1 for L in lengths if L > j)
            st = None if state is None else MemoryState(state.h[:n], state.c[:n])
            part, st = model.score_memory(windows[:n, j], st)
            for key in SCORE_KEYS:
                sums[key] += float(part[key])
            state = st if state is None or n == state.h.shape[0] else MemoryState(
                torch.cat([st.h, state.h[n:]]), torch.cat([st.c, state.c[n:]]))
    model.train(was_training)
    return {
        "selection_loss": sums["selection_loss_sum"] / max(sums["selection_count"], 1.0),
        "last_ce": sums["last_ce_sum"] / max(sums["last_tokens"], 1.0),
        "token_acc": sums["last_correct"] / max(sums["last_tokens"], 1.0),
        "exact_acc": sums["exact_sentences"] / max(sums["sentences"], 1.0),
        "last_tokens": int(sums["last_tokens"]),
        "sentences": int(sums["sentences"]),
    }


# ---- files ---------------------------------------------------------------------------------------------
def _atomic_json(path: Path, payload: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)


def _save_weights_atomically(model: Any, out: Path) -> None:
    """save_pretrained into a scratch folder, then move each file over the old one."""
    scratch = out / ".saving"
    shutil.rmtree(scratch, ignore_errors=True)
    model.save_pretrained(scratch)
    for f in scratch.iterdir():
        f.replace(out / f.name)
    scratch.rmdir()


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(rec) + "\n" for rec in history))
    tmp.replace(path)


def plot_curves(
    curves: dict[str, list[dict[str, Any]]],
    path: str | Path,
    uniform_ce: float | None = None,
    best: dict[str, int] | None = None,
    title: str = "",
) -> Path:
    """L_S(T) per epoch, one line per model (the paper's figure 2); the selected epoch of each is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for label, history in curves.items():
        epochs = [rec["epoch"] for rec in history]
        values = [rec["val_last_ce"] for rec in history]
        (line,) = ax.plot(epochs, values, marker="o", ms=3, label=label)
        if best and label in best and history:
            rec = history[best[label]]
            ax.plot([rec["epoch"]], [rec["val_last_ce"]], marker="*", ms=12, color=line.get_color())
    if uniform_ce is not None:
        ax.axhline(uniform_ce, ls="--", lw=1, color="grey", label=f"uniform ln|V| = {uniform_ce:.2f}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation L_S(T) (nats per token)")
    ax.set_title(title or "Last-sentence cross-entropy per epoch")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- one run -------------------------------------------------------------------------------------------
@dataclass
class TrainResult:
    kind: str
    out: Path
    history: list[dict[str, Any]]
    best_epoch: int  # zero-based index into history
    stopped_by: str
    summary: dict[str, Any]

    @property
    def best(self) -> dict[str, Any]:
        return self.history[self.best_epoch]


EpochHook = Callable[[str, int], None]  # (model kind, finished epoch number 1..E), e.g. to simulate a kill


def _train_one(
    kind: str,
    args: TrainArgs,
    data: PreparedData,
    out: Path,
    ctx: DistContext,
    on_epoch_end: EpochHook | None = None,
) -> TrainResult:
    from tqdm.auto import tqdm

    ckpt_path = out / CHECKPOINT_DIR / CHECKPOINT_FILE
    fingerprint = {**args.fingerprint(), "model": kind, "world_size": ctx.world_size}
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    shape = preset_shape(args.preset)
    model: Any = build_model(
        kind, args.preset, data.tokenizer, args.dropout, args.causal_slices and kind == "four_tensor",
        args.memory_config(shape["d_x"] * shape["d_t"]),
    ).to(ctx.device)
    if args.init_from is not None:
        init_weights(model, args.init_from)
    optimizer = torch.optim.AdamW(parameter_groups(model, args), lr=args.lr, weight_decay=args.weight_decay)
    history: list[dict[str, Any]] = []
    start_epoch = 0

    if ckpt_path.is_file():
        ckpt = torch.load(ckpt_path, map_location=ctx.device, weights_only=False)
        if ckpt["fingerprint"] != fingerprint:
            diff = sorted(k for k in fingerprint if ckpt["fingerprint"].get(k) != fingerprint[k])
            raise UserError(
                f"{out} holds a checkpoint of a different run (differs in {', '.join(diff)}); "
                f"use another --out or delete {ckpt_path.parent}"
            )
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        _set_rng_state(ckpt["rng"])
        history = ckpt["history"]
        start_epoch = len(history)
        logger.info("%s: resuming %s after epoch %d", LABELS[kind], out, start_epoch)

    step_module: nn.Module = _SegmentModule(model) if args.memory else _StepModule(model)
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        step_module = DDP(step_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)

    n_params = sum(p.numel() for p in model.parameters())
    uniform = uniform_cross_entropy(data.tokenizer.vocab_size)
    train_ids = data.train.ids
    train_clips = clip_windows(data.train) if args.memory else []
    val_clips = clip_windows(data.val) if args.memory else []
    # The sampler only needs len(); it yields window (memory: clip) indices, the same shards as torchrun's loaders.
    indices: Any = range(len(train_clips) if args.memory else len(train_ids))
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed
    )
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt_path.parent.mkdir(exist_ok=True)
        data.tokenizer.save(out)
        _write_log(out / LOG_FILE, history)  # drops lines of an epoch that ran after the last checkpoint
    decision = (
        stop_decision([h["val_selection_loss"] for h in history], args.epochs, args.patience, args.tolerance)
        if history
        else StopDecision(False, "", 0)
    )
    started = time.perf_counter()

    epoch = start_epoch
    while not decision.stop:
        t0 = time.perf_counter()
        torch.manual_seed(_epoch_seed(args.seed, epoch, ctx.rank))
        sampler.set_epoch(epoch)  # shuffles with seed + epoch; each rank takes its own shard
        order = torch.tensor(list(sampler), dtype=torch.long)
        model.train()
        loss_sum, n_seen = 0.0, 0
        per_batch = args.clips_per_batch if args.memory else args.batch_size
        batches = range(0, len(order), per_batch)
        bar = tqdm(
            batches,
            desc=f"{LABELS[kind]} epoch {epoch + 1}/{args.epochs}",
            leave=False,
            disable=not (args.progress and ctx.is_main),
            unit="batch",
        )
        for i in bar:
            if args.memory:
                group = [train_clips[int(k)] for k in order[i : i + per_batch]]
                seg_loss, seg_windows = train_clip_batch(step_module, optimizer, group, args.bptt_windows, ctx.device)
                loss_sum += seg_loss
                n_seen += seg_windows
                bar.set_postfix(loss=f"{loss_sum / max(n_seen, 1):.3f}")
                continue
            batch = train_ids[order[i : i + args.batch_size]].to(ctx.device)  # (B, T+1, N)
            loss = step_module(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.detach()) * batch.shape[0]
            n_seen += batch.shape[0]
            bar.set_postfix(loss=f"{loss_sum / max(n_seen, 1):.3f}")
        train_loss = loss_sum / max(n_seen, 1)
        if ctx.distributed:
            t = torch.tensor([loss_sum, float(n_seen)], dtype=torch.float64, device=ctx.device)
            dist.all_reduce(t)
            train_loss = float(t[0] / t[1])
        # Validation on rank 0 only; the others receive its numbers, so every rank takes the same decision.
        def validate() -> dict[str, float]:
            if args.memory:
                return evaluate_clips(model, val_clips, max(args.batch_size, 64), ctx.device)
            return evaluate(model, data.val.ids, max(args.batch_size, 64), ctx.device)

        metrics = [validate() if ctx.is_main else None]
        if ctx.distributed:
            dist.broadcast_object_list(metrics, src=0)
        m = metrics[0]
        assert m is not None
        record = {
            "epoch": epoch + 1,
            "train_loss": round(train_loss, 6),
            "val_selection_loss": round(m["selection_loss"], 6),
            "val_last_ce": round(m["last_ce"], 6),
            "val_token_acc": round(m["token_acc"], 6),
            "val_exact_acc": round(m["exact_acc"], 6),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        history.append(record)
        decision = stop_decision(
            [h["val_selection_loss"] for h in history], args.epochs, args.patience, args.tolerance
        )
        logger.info(
            "%s epoch %d: train %.4f  val selection %.4f  L_S(T) %.4f  token acc %.3f  exact %.3f  (%.1fs)",
            LABELS[kind],
            record["epoch"],
            train_loss,
            m["selection_loss"],
            m["last_ce"],
            m["token_acc"],
            m["exact_acc"],
            record["seconds"],
        )
        if ctx.is_main:
            # Order matters for a kill at any point: best weights, then the log, then the checkpoint; a run
            # resumed from the previous checkpoint recomputes this epoch to the same numbers.
            if decision.best_epoch == len(history) - 1:
                _save_weights_atomically(model, out)
            _write_log(out / LOG_FILE, history)
            plot_curves(
                {LABELS[kind]: history}, out / CURVE_FILE, uniform, {LABELS[kind]: decision.best_epoch}
            )
            tmp = ckpt_path.with_name(CHECKPOINT_FILE + ".tmp")
            torch.save(
                {
                    "fingerprint": fingerprint,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "rng": _rng_state(),
                    "history": history,
                },
                tmp,
            )
            tmp.replace(ckpt_path)
        if ctx.distributed:
            dist.barrier()
        epoch += 1
        if on_epoch_end is not None:
            on_epoch_end(kind, epoch)

    best = history[decision.best_epoch]
    summary = {
        "model": kind,
        "preset": args.preset,
        "parameters": n_params,
        "config": model.config.to_dict(),
        "args": asdict(args),
        "data": data.stats,
        "vocab_size": data.tokenizer.vocab_size,
        "uniform_ce": uniform,
        "best_epoch": best["epoch"],
        "epochs_run": len(history),
        "stopped_by": decision.reason,
        "best": best,
        "seconds_total": round(sum(h["seconds"] for h in history), 3),
        "seconds_this_session": round(time.perf_counter() - started, 3),
        "world_size": ctx.world_size,
        "device": str(ctx.device),
        "split": {
            "seed": args.seed,
            "val_fraction": args.val_fraction,
            "max_windows": args.max_windows,
            "data_format": args.data_format,
        },
    }
    if ctx.is_main:
        _atomic_json(out / SUMMARY_FILE, summary)
        logger.info(
            "%s: selected epoch %d of %d (stopped by %s): L_S(T) %.4f vs uniform ln|V| %.4f -> %s",
            LABELS[kind],
            best["epoch"],
            len(history),
            decision.reason,
            best["val_last_ce"],
            uniform,
            out,
        )
    if os.environ.get(PARAM_HASH_ENV):
        Path(f"{os.environ[PARAM_HASH_ENV]}.{kind}.rank{ctx.rank}").write_text(parameter_hash(model) + "\n")
    return TrainResult(kind, out, history, decision.best_epoch, decision.reason, summary)


def train_predictor(args: TrainArgs, on_epoch_end: EpochHook | None = None) -> dict[str, TrainResult]:
    """Train the model(s) of `args`; rerunning the same arguments resumes from out/checkpoint/last.pt."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    ctx = init_distributed(args.device)
    if not ctx.is_main:
        logging.getLogger("pipeline").setLevel(logging.WARNING)  # one copy of the progress lines
    set_determinism(ctx.device)
    out = Path(args.out)
    kinds = list(MODEL_KINDS) if args.model == "both" else [args.model]
    dirs = {k: (out / k if args.model == "both" else out) for k in kinds}
    # A resumed run reuses the saved tokenizer, so its ids cannot drift from the checkpoint's.
    saved = next((d for d in dirs.values() if (d / CHECKPOINT_DIR / CHECKPOINT_FILE).is_file()), None)
    tokenizer = StateTokenizer.from_file(saved) if saved is not None else None
    data = prepare_data(args, tokenizer)
    results = {k: _train_one(k, args, data, dirs[k], ctx, on_epoch_end) for k in kinds}
    if args.model == "both" and ctx.is_main:
        plot_curves(
            {LABELS[k]: r.history for k, r in results.items()},
            out / BOTH_CURVE_FILE,
            uniform_cross_entropy(data.tokenizer.vocab_size),
            {LABELS[k]: r.best_epoch for k, r in results.items()},
            title=f"L_S(T) per epoch, preset {args.preset}",
        )
    if ctx.distributed:
        dist.barrier()
    return results

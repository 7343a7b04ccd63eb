"""Training of the predictors (either kind): a plain, seeded loop with the section 8.2 stopping rule.

Owns the data preparation, the model's construction from a preset, the epoch loop (single process or torchrun/DDP), checkpoint-and-resume, the per-epoch
JSON-lines log and the L_S(T) plot; each epoch is scored by `pipeline.evaluation.predictor.evaluate`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler

from models.baseline import BaselineConfig, BaselineModel
from models.four_tensor import FourTensorModel
from models.presets import four_tensor_config, get_preset
from pipeline.data import (
    SUMMARY_FILE,
    WindowSet,
    cap_clips,
    cap_windows,
    clip_windows,
    make_windows,
    read_sequences,
    split_sequences,
    stack_clips,
    uniform_cross_entropy,
    val_window_cap,
)
from pipeline.evaluation.predictor import evaluate, evaluate_clips
from pipeline.tokenizer import StateTokenizer
from pipeline.training.args import BOTH, MODEL_KINDS, RECALL_TARGETS, TrainArgs
from pipeline.training.schedule import warmup_cosine
from pipeline.utils import UserError, atomic_torch_save, atomic_write_json, atomic_write_text, resolve_device

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "last.pt"
LOG_FILE = "train_log.jsonl"
CURVE_FILE = "loss_curve.png"
BOTH_CURVE_FILE = "loss_curves.png"
LABELS = {"four_tensor": "4-tensor", "baseline": "1-D baseline", "attentime_lm": "1-D Attentime"}


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
    """(vocab_size, d_x, d_t, n_heads, n_layers, N, T) of a named preset; unknown names -> UserError."""
    try:
        return get_preset(preset).shape()
    except ValueError as err:
        raise UserError(f"--preset: {err}") from None


FEW_WINDOWS = 500  # fewer training windows than this: say the predictor will learn little


def corpus_warnings(sequences: list[Any], train_windows: int) -> list[str]:
    """What to tell a user before training on a corpus that cannot teach much: too few windows, or states most of
    which the captioner was unsure of (the `unsure` flags `semworld batch` writes into states.jsonl)."""
    out = []
    if train_windows < FEW_WINDOWS:
        out.append(f"only {train_windows} training windows ({len(sequences)} sequences): a predictor learns little "
                   f"from fewer than {FEW_WINDOWS}; read the validation numbers against chance (logged at the end)")  # fmt: skip
    flags = [bool(u) for seq in sequences for u in (seq.extra.get("unsure") or [])]
    if flags and 2 * sum(flags) > len(flags):
        out.append(f"{sum(flags)} of {len(flags)} states are marked unsure by the captioner that wrote them: the "
                   "predictor will learn what the captioner guesses, not what happens in the videos")  # fmt: skip
    return out


def prepare_data(args: TrainArgs, tokenizer: StateTokenizer | None = None) -> PreparedData:
    """Read, split by story (seeded), build the tokenizer over all sequences (as the paper does), make windows."""
    shape = preset_shape(args.preset)
    T, N = shape["T"], shape["N"]
    sequences = read_sequences(args.data, args.data_format)
    split = split_sequences(sequences, args.val_fraction, seed=args.seed)
    if tokenizer is None:
        tokenizer = StateTokenizer.build((s for seq in sequences for s in seq.states), args.min_frequency)
    # rollout-aware training: K more states per training window, the rolled-out context's true past (a memory
    # run rolls out from the clip's earlier windows instead, rollout_clip_windows)
    if args.min_history is not None and args.min_history > T:
        raise UserError(f"--min-history {args.min_history}: at most the window T={T} of --preset {args.preset}")
    if args.min_history is not None and args.rollout_steps and not args.memory:
        raise UserError("--min-history does not combine with --rollout-steps without --memory")
    train = make_windows(split.train, tokenizer, T + (0 if args.memory else args.rollout_steps), N,
                         min_history=args.min_history)
    val = make_windows(split.val, tokenizer, T, N, min_history=args.min_history)
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
    for warning in corpus_warnings(sequences, len(train)):
        logger.warning("%s: %s", args.data, warning)
    stats = {
        "sequences": len(sequences),
        "train_sequences": len(split.train),
        "val_sequences": len(split.val),
        "train_windows": len(train),
        "val_windows": len(val),
        "train_windows_before_cap": full_train,
        "val_windows_before_cap": full_val,
        "pad_fraction": round(
            float(((train.ids == 0).sum() + (val.ids == 0).sum()) / (train.ids.numel() + val.ids.numel())), 4
        ),
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
    kind: str,
    preset: str,
    tokenizer: StateTokenizer,
    dropout: float = 0.1,
    causal_slices: bool = False,
    attention: str = "four_tensor",
    memory: Any = None,
) -> Any:
    """A fresh predictor of `kind` shaped by `preset`, with vocab_size and end_ids from the tokenizer."""
    cfg = four_tensor_config(
        preset,
        vocab_size=tokenizer.vocab_size,
        end_ids=tokenizer.end_ids,
        dropout=dropout,
        slice_causal=causal_slices,
        attention=attention,
        **({"memory": memory} if memory is not None else {}),
    )
    if kind == "four_tensor":
        return FourTensorModel(cfg)
    if kind == "baseline":
        return BaselineModel(BaselineConfig.from_predictor(cfg))
    if kind == "attentime_lm":
        from models.attentime import AttentimeLM, AttentimeLMConfig

        return AttentimeLM(AttentimeLMConfig.from_predictor(cfg))  # type: ignore[arg-type]
    raise ValueError(f"model kind must be one of {MODEL_KINDS}, got {kind!r}")


class _StepModule(nn.Module):
    """forward = training_step, so DistributedDataParallel's hooks see the loss computation."""

    def __init__(self, model: Any, last_only: bool = False) -> None:
        super().__init__()
        self.model = model
        self.last_only = last_only

    def forward(self, token_ids_full: torch.Tensor) -> torch.Tensor:
        if self.last_only:
            return self.model.training_step(token_ids_full, last_only=True)
        return self.model.training_step(token_ids_full)


# ---- files ---------------------------------------------------------------------------------------------
class _SegmentModule(nn.Module):
    """forward = a memory model's loss over consecutive windows of a batch of clips, state carried (one DDP
    forward per backward)."""

    def __init__(self, model: Any, last_only: bool = False, recall_weight: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.last_only = last_only
        self.recall_weight = recall_weight

    def forward(self, windows: torch.Tensor, lengths: list[int], state: Any, previous: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """windows (B, K, T+1, N) of B clips sorted by lengths (windows left in each, descending), state (h, c)
        for the B rows or None -> summed CE, target count, and the state after the last window of each row.
        previous (B, K, N): the sentence written just before each window (window_loss's recall term)."""
        from models.tensor_memory import MemoryState

        loss_sum = windows.new_zeros((), dtype=torch.float32)
        count = windows.new_zeros(())
        for j in range(windows.shape[1]):
            n = sum(1 for L in lengths if L > j)  # rows still running: a prefix, the rows are sorted
            if n == 0:
                break
            st = None if state is None else MemoryState(state.h[:n], state.c[:n])
            prev = None if previous is None or not self.recall_weight else previous[:n, j]
            ls, cnt, st = self.model.window_loss(windows[:n, j], st, self.last_only, prev, self.recall_weight)
            loss_sum, count = loss_sum + ls, count + cnt
            state = st if state is None or n == state.h.shape[0] else MemoryState(
                torch.cat([st.h, state.h[n:]]), torch.cat([st.c, state.c[n:]]))
        return loss_sum, count, state


def recall_targets(windows: torch.Tensor, mode: str = "last") -> torch.Tensor:
    """The sentence window_loss's recall term asks each window's incoming memory to spell: (B, K, T+1, N) windows
    of whole clips (all-zero states are padding) -> (B, K, N), all padding where there is none.

    last: the clip's state just before window j (the sentence written last). novel: the latest state written
    before window j that none of the window's T input states repeats, i.e. the newest thing only the memory can
    bring back. With last, a key followed by fillers is asked for once and then the fillers are; with novel it
    is asked for until it shows again, which asks the memory to hold it rather than overwrite it.
    """
    if mode not in RECALL_TARGETS:
        raise ValueError(f"recall target must be one of {RECALL_TARGETS}, got {mode!r}")
    written = windows[:, :, 0]  # (B, K, N) slice 0 of window i: written when window i + 1 starts
    running = windows[:, :, :-1].ne(0).flatten(2).any(-1)[..., None]  # (B, K, 1) not a window past the clip's end
    if mode == "last":
        previous = torch.cat([torch.zeros_like(written[:, :1]), written[:, :-1]], dim=1)
        return previous * running
    B, K, N = written.shape
    inputs = windows[:, :, :-1]  # (B, K, T, N) the window's input states
    # shown[b, j, i]: state i equals one of window j's inputs
    shown = (written[:, None, :, None] == inputs[:, :, None]).all(-1).any(-1)  # (B, K, K)
    before = torch.ones(K, K, dtype=torch.bool, device=windows.device).tril(-1)  # (j, i): i < j
    real = written.ne(0).any(-1)  # (B, K) not a padding state
    ok = before & ~shown & real[:, None, :]  # (B, K, K)
    index = torch.arange(K, device=windows.device).expand(B, K, K)
    latest = torch.where(ok, index, -1).amax(-1)  # (B, K) the latest such i, -1 for none
    picked = written.gather(1, latest.clamp(min=0)[..., None].expand(B, K, N))  # (B, K, N)
    return torch.where((latest >= 0)[..., None] & running, picked, torch.zeros_like(picked))


def train_clip_batch(
    step_module: nn.Module, optimizer: torch.optim.Optimizer, group: list[torch.Tensor], bptt_windows: int,
    device: torch.device | str, rollout: Callable[[torch.Tensor, list[int]], torch.Tensor] | None = None,
    recall_target: str = "last",
) -> tuple[float, int]:
    """Train a memory model on a batch of whole clips, in order, with truncated back-propagation: (h, c) is
    carried from window to window; every bptt_windows windows the summed loss is back-propagated (mean over
    the targets), the optimizer steps and the state is detached. rollout: (windows, lengths) -> windows, applied
    to the stacked clips first (scheduled sampling, rollout_clip_windows). Returns (sum of segment losses x
    windows, windows)."""
    windows, lengths = stack_clips(group)
    windows = windows.to(device)
    if rollout is not None:
        windows = rollout(windows, lengths)
    previous = recall_targets(windows, recall_target)  # (B, K, N) what each window's recall term asks for
    state = None
    loss_total, seen = 0.0, 0
    for j in range(0, windows.shape[1], bptt_windows):
        part = [max(0, min(L - j, bptt_windows)) for L in lengths]
        loss_sum, count, state = step_module(windows[:, j : j + bptt_windows], part, state,
                                             previous[:, j : j + bptt_windows])
        loss = loss_sum / count.clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        state = state.detach()  # truncation: no gradient into earlier segments, the state itself carries on
        loss_total += float(loss.detach()) * sum(part)
        seen += sum(part)
    return loss_total, seen


def learning_rate_factor(args: TrainArgs, step: int, total_steps: int) -> float:
    """The schedule's multiplier on each group's base lr at optimizer step `step` (zero-based) of total_steps:
    1 for the constant schedule; linear warmup, then cosine decay to min_lr_ratio for the cosine one."""
    if args.lr_schedule == "constant":
        return 1.0
    return warmup_cosine(1.0, step, total_steps, args.warmup_steps, args.min_lr_ratio)


def set_learning_rate(optimizer: torch.optim.Optimizer, args: TrainArgs, step: int, total_steps: int) -> None:
    """Set every group's lr to its base lr times the schedule's factor (stateless: a resumed run continues it)."""
    factor = learning_rate_factor(args, step, total_steps)
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor


@torch.no_grad()
def rollout_windows(model: Any, long: torch.Tensor, K: int, prob: float) -> torch.Tensor:
    """Scheduled sampling at the state level. long (B, T+K+1, N) true states -> windows (B, T+1, N) whose
    target (last state) is the true one; in each row drawn with probability `prob`, the last k context states
    (k in 1..K, one draw per batch) are the model's own rollout (eval mode, argmax) from the true T states
    before them. Draws use torch's global generator (seeded per epoch, saved in checkpoints)."""
    T = long.shape[1] - K - 1
    out = long[:, K:].clone()  # the true window of the last T+1 states
    rows = torch.rand(long.shape[0]) < prob  # (B,)
    if K == 0 or not bool(rows.any()):
        return out
    k = int(torch.randint(1, K + 1, ()))
    ctx = long[rows, K - k : K - k + T]  # (b, T, N): true states up to just before position K+T-k
    was_training = model.training
    model.eval()
    for _ in range(k):
        nxt, _ = model.predict_next(ctx)  # (b, N)
        ctx = torch.cat([ctx[:, 1:], nxt[:, None]], dim=1)
    model.train(was_training)
    out[rows, :T] = ctx  # positions K..K+T-1, the last k of them predicted
    return out


@torch.no_grad()
def rollout_clip_windows(model: Any, windows: torch.Tensor, lengths: list[int], K: int, prob: float) -> torch.Tensor:
    """Scheduled sampling for a memory model, on whole clips. windows (B, W, T+1, N): window j of a row holds
    the clip's states j..j+T (rows end at lengths[b], zero padding after) -> the same windows where, in each
    (row, window) drawn with probability `prob`, the last k context states are the model's own rollout (eval
    mode, argmax) from the true window k before, with the memory as it stood there; the target stays true.
    k in 1..K is drawn once per batch (fewer at the start of a clip: min(k, j)). The memory before each window
    comes from one pass over the true windows with the weights as they are now; slice 0 of a window stays true
    while k < T, so what the training pass writes is unchanged. Draws use torch's global generator."""
    from models.tensor_memory import MemoryState

    if K == 0 or prob == 0.0:
        return windows
    B, W, T1, _ = windows.shape
    T = T1 - 1
    k = int(torch.randint(1, K + 1, ()))
    drawn = torch.rand(B, W) < prob  # (B, W)
    live = torch.arange(W)[None, :] < torch.tensor(lengths)[:, None]  # (B, W) windows that exist
    drawn &= live
    drawn[:, 0] = False  # nothing before the first window to roll out from
    if not bool(drawn.any()):
        return windows
    was_training = model.training
    model.eval()
    before = [model.init_memory(B, windows.device)]  # before[j]: (h, c) before window j
    for j in range(W - 1):
        _, st = model.memory_hidden_states(windows[:, j, :T], before[-1])
        before.append(st)
    out = windows.clone()
    for j in range(1, W):
        rows = drawn[:, j].nonzero().flatten()  # (b,)
        if rows.numel() == 0:
            continue
        kk = min(k, j)
        ctx = windows[rows, j - kk, :T]  # (b, T, N) the true window kk before
        st = MemoryState(before[j - kk].h[rows], before[j - kk].c[rows])
        for _ in range(kk):
            nxt, st = model.predict_next(ctx, st)  # (b, N)
            ctx = torch.cat([ctx[:, 1:], nxt[:, None]], dim=1)
        out[rows, j, :T] = ctx  # the window's last kk context states are predicted
    model.train(was_training)
    return out


def init_tokenizer(directory: str | Path) -> StateTokenizer:
    """The tokenizer saved beside the --init-from weights (their embedding rows are numbered by it)."""
    if not (Path(directory) / "tokenizer.json").is_file():
        raise UserError(f"--init-from {directory}: no tokenizer.json there (the weights' ids need it)")
    return StateTokenizer.from_file(directory)


def _shift_layers(saved: dict[str, torch.Tensor], at: int) -> dict[str, torch.Tensor]:
    """saved's weights with every layer (and memory tap) numbered `at` or more moved one down: layers.2.fc1.weight
    -> layers.3.fc1.weight for at <= 2."""
    def shifted(key: str) -> str:
        m = re.fullmatch(r"(layers|memory_taps)\.(\d+)(\..*)?", key)
        if m is None or int(m.group(2)) < at:
            return key
        return f"{m.group(1)}.{int(m.group(2)) + 1}{m.group(3) or ''}"

    return {shifted(k): v for k, v in saved.items()}


def _identity_layer(model: Any, at: int) -> None:
    """Layer `at` of a 4-tensor model adds nothing to its input: the attention's values and the MLP's output are
    zero, so both residual branches are zero until training moves them (queries, keys and fc1 keep their init)."""
    layer = model.layers[at]
    with torch.no_grad():
        layer.attention.W_V.zero_()
        layer.fc2.weight.zero_()
        layer.fc2.bias.zero_()


def init_weights(model: Any, directory: str | Path, grow_layer: int | None = None) -> None:
    """Copy the weights of a saved predictor into model; the memory's own weights may be absent (fresh).

    grow_layer: the saved predictor has one layer fewer; model's layer grow_layer is new and starts as the
    identity, the saved layers (and their memory taps) from that index on fill the ones after it.
    """
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"--init-from {directory}: no model.safetensors there")
    saved = load_file(str(path))
    own = model.state_dict()
    fresh: tuple[str, ...] = ("memory.", "memory_taps.")
    if grow_layer is not None:
        n_saved = len({k.split(".")[1] for k in saved if k.startswith("layers.")})
        n_own = len(model.layers)
        if n_own != n_saved + 1 or not 0 <= grow_layer < n_own:
            raise UserError(f"--grow-layer {grow_layer}: the model has {n_own} layers and {directory} has "
                            f"{n_saved}; growing needs one more layer and an index below {n_own}")
        saved = _shift_layers(saved, grow_layer)
        taps = {k.split(".")[1] for k in own if k.startswith("memory_taps.")}
        saved_taps = {k.split(".")[1] for k in saved if k.startswith("memory_taps.")}
        if saved_taps and taps != saved_taps:
            raise UserError(f"--grow-layer {grow_layer}: the memory taps would sit at layers {sorted(taps)} but "
                            f"the saved ones move to {sorted(saved_taps)}; choose --memory-every-n-layers so "
                            "that the new layer has none")
        fresh = (*fresh, f"layers.{grow_layer}.")
    missing = sorted(k for k in own if k not in saved and not k.startswith(fresh))
    extra = sorted(k for k in saved if k not in own)
    bad = sorted(k for k in saved if k in own and saved[k].shape != own[k].shape)
    if missing or extra or bad:
        raise UserError(f"--init-from {directory}: weights do not fit this model (missing {missing[:3]}, "
                        f"unexpected {extra[:3]}, other shapes {bad[:3]})")
    nn.Module.load_state_dict(model, {**own, **saved})
    if grow_layer is not None:
        _identity_layer(model, grow_layer)


def parameter_groups(model: nn.Module, args: TrainArgs) -> list[dict[str, Any]]:
    """One AdamW group, or with --memory-lr-scale != 1 a second group for the memory (interface and taps) at
    lr * memory_lr_scale."""
    params = list(model.named_parameters())
    if not args.memory or args.memory_lr_scale == 1.0:
        return [{"params": [p for _, p in params]}]
    is_mem = lambda name: name.startswith(("memory.", "memory_taps."))  # noqa: E731
    return [{"params": [p for n, p in params if not is_mem(n)]},
            {"params": [p for n, p in params if is_mem(n)], "lr": args.lr * args.memory_lr_scale}]


def _save_weights_atomically(model: Any, out: Path) -> None:
    """save_pretrained into a scratch folder, then move each file over the old one."""
    scratch = out / ".saving"
    shutil.rmtree(scratch, ignore_errors=True)
    model.save_pretrained(scratch)
    for f in scratch.iterdir():
        f.replace(out / f.name)
    scratch.rmdir()


def _write_log(path: Path, history: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(rec) + "\n" for rec in history))


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
    model: Any = field(repr=False, default=None)  # this process's replica after the last epoch run

    @property
    def best(self) -> dict[str, Any]:
        return self.history[self.best_epoch]


EpochHook = Callable[[str, int], None]  # (model kind, finished epoch number 1..E), e.g. to simulate a kill


@dataclass
class PredictorRun:
    """One model's training run: what setup makes and the epoch loop and the save step share."""

    kind: str
    args: TrainArgs
    data: PreparedData
    out: Path
    ctx: DistContext
    model: Any
    optimizer: torch.optim.Optimizer
    step_module: nn.Module  # forward = the model's training step (DDP-wrapped under torchrun)
    sampler: DistributedSampler[int]
    fingerprint: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    train_clips: list[torch.Tensor] = field(default_factory=list)  # memory runs: each clip's windows in order
    val_clips: list[torch.Tensor] = field(default_factory=list)

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    @property
    def ckpt_path(self) -> Path:
        return self.out / CHECKPOINT_DIR / CHECKPOINT_FILE

    def decide(self) -> StopDecision:
        """The section 8.2 rule on the validation selection losses so far."""
        if not self.history:
            return StopDecision(False, "", 0)
        losses = [h["val_selection_loss"] for h in self.history]
        return stop_decision(losses, self.args.epochs, self.args.patience, self.args.tolerance)


def _train_one(
    kind: str,
    args: TrainArgs,
    data: PreparedData,
    out: Path,
    ctx: DistContext,
    on_epoch_end: EpochHook | None = None,
) -> TrainResult:
    """Set up (or resume) one model, fit it epoch by epoch until the stopping rule says so, then summarise."""
    run = setup_run(kind, args, data, out, ctx)
    decision = run.decide()
    while not decision.stop:
        epoch = len(run.history)
        run.history.append(fit_epoch(run, epoch))
        decision = run.decide()
        log_epoch(run, run.history[-1])
        if ctx.is_main:
            save_epoch(run, decision)
        if ctx.distributed:
            dist.barrier()
        if on_epoch_end is not None:
            on_epoch_end(kind, epoch + 1)
    return finish_run(run, decision)


def setup_run(kind: str, args: TrainArgs, data: PreparedData, out: Path, ctx: DistContext) -> PredictorRun:
    """The seeded model and optimizer (restored from out/checkpoint/last.pt when it holds this run), DDP under
    torchrun, the sharded sampler, and on rank 0 the tokenizer and the log as of the checkpoint."""
    fingerprint = {**args.fingerprint(), "model": kind, "world_size": ctx.world_size}
    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    shape = preset_shape(args.preset)
    model: Any = build_model(
        kind,
        args.preset,
        data.tokenizer,
        args.dropout,
        args.causal_slices and kind == "four_tensor",
        args.attention if kind == "four_tensor" else "four_tensor",
        args.memory_config(shape["d_x"] * shape["d_t"]),
    ).to(ctx.device)
    if args.init_from is not None:
        init_weights(model, args.init_from, args.grow_layer)
    optimizer = torch.optim.AdamW(parameter_groups(model, args), lr=args.lr, weight_decay=args.weight_decay)
    history: list[dict[str, Any]] = []
    ckpt_path = out / CHECKPOINT_DIR / CHECKPOINT_FILE
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
        logger.info("%s: resuming %s after epoch %d", LABELS[kind], out, len(history))

    # what the schedule scales (saved in, and restored from, checkpoints)
    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    step_module: nn.Module = (_SegmentModule(model, last_only=args.target_slices == "last",
                                                 recall_weight=args.memory_recall_weight) if args.memory
                              else _StepModule(model, last_only=args.target_slices == "last"))
    if ctx.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        step_module = DDP(step_module, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    train_clips = clip_windows(data.train) if args.memory else []
    # The sampler only needs len(); it yields window (memory: clip) indices, the same shards as torchrun's loaders.
    indices: Any = range(len(train_clips) if args.memory else len(data.train.ids))
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=args.seed
    )
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt_path.parent.mkdir(exist_ok=True)
        data.tokenizer.save(out)
        _write_log(out / LOG_FILE, history)  # drops lines of an epoch that ran after the last checkpoint
    run = PredictorRun(kind, args, data, out, ctx, model, optimizer, step_module, sampler, fingerprint, history)
    if args.memory:
        run.train_clips, run.val_clips = train_clips, clip_windows(data.val)
    return run


def fit_epoch(run: PredictorRun, epoch: int) -> dict[str, Any]:
    """Train one epoch (zero-based `epoch`) on this rank's shard, then validate on rank 0; the epoch's record."""
    from tqdm.auto import tqdm

    args, ctx, model = run.args, run.ctx, run.model
    t0 = time.perf_counter()
    torch.manual_seed(_epoch_seed(args.seed, epoch, ctx.rank))
    run.sampler.set_epoch(epoch)  # shuffles with seed + epoch; each rank takes its own shard
    order = torch.tensor(list(run.sampler), dtype=torch.long)
    model.train()
    loss_sum, n_seen = 0.0, 0
    per_batch = args.clips_per_batch if args.memory else args.batch_size
    bar = tqdm(
        range(0, len(order), per_batch),
        desc=f"{run.label} epoch {epoch + 1}/{args.epochs}",
        leave=False,
        disable=not (args.progress and ctx.is_main),
        unit="batch",
    )
    steps_per_epoch = -(-len(order) // per_batch)
    rollout = None if not (args.memory and args.rollout_steps) else (
        lambda w, lens: rollout_clip_windows(model, w, lens, args.rollout_steps, args.rollout_prob))
    for step, i in enumerate(bar):
        set_learning_rate(run.optimizer, args, epoch * steps_per_epoch + step, args.epochs * steps_per_epoch)
        if args.memory:
            group = [run.train_clips[int(k)] for k in order[i : i + per_batch]]
            seg_loss, seg_windows = train_clip_batch(run.step_module, run.optimizer, group, args.bptt_windows,
                                                     ctx.device, rollout, args.memory_recall_target)
            loss_sum += seg_loss
            n_seen += seg_windows
            bar.set_postfix(loss=f"{loss_sum / max(n_seen, 1):.3f}")
            continue
        batch = run.data.train.ids[order[i : i + args.batch_size]].to(ctx.device)  # (B, T+1(+K), N)
        if args.rollout_steps:
            batch = rollout_windows(model, batch, args.rollout_steps, args.rollout_prob)  # (B, T+1, N)
        loss = run.step_module(batch)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
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
            return evaluate_clips(model, run.val_clips, max(args.batch_size, 64), ctx.device)
        return evaluate(model, run.data.val.ids, max(args.batch_size, 64), ctx.device)

    metrics = [validate() if ctx.is_main else None]
    if ctx.distributed:
        dist.broadcast_object_list(metrics, src=0)
    m = metrics[0]
    assert m is not None
    selection = m["last_ce"] if args.target_slices == "last" else m["selection_loss"]
    return {
        "epoch": epoch + 1,
        "train_loss": round(train_loss, 6),
        "val_selection_loss": round(selection, 6),  # what the 8.2 rule and the choice of epoch read
        "val_last_ce": round(m["last_ce"], 6),
        "val_token_acc": round(m["token_acc"], 6),
        "val_exact_acc": round(m["exact_acc"], 6),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def log_epoch(run: PredictorRun, record: dict[str, Any]) -> None:
    logger.info(
        "%s epoch %d: train %.4f  val selection %.4f  L_S(T) %.4f  token acc %.3f  exact %.3f  (%.1fs)",
        run.label,
        record["epoch"],
        record["train_loss"],
        record["val_selection_loss"],
        record["val_last_ce"],
        record["val_token_acc"],
        record["val_exact_acc"],
        record["seconds"],
    )


def save_epoch(run: PredictorRun, decision: StopDecision) -> None:
    """Rank 0, after each epoch. Order matters for a kill at any point: the weights when this epoch is the
    minimum so far (the 8.2 checkpoint), then the log and the curve, then the checkpoint; a run resumed from the
    previous checkpoint recomputes this epoch to the same numbers."""
    if decision.best_epoch == len(run.history) - 1:
        _save_weights_atomically(run.model, run.out)
    _write_log(run.out / LOG_FILE, run.history)
    uniform = uniform_cross_entropy(run.data.tokenizer.vocab_size)
    plot_curves({run.label: run.history}, run.out / CURVE_FILE, uniform, {run.label: decision.best_epoch})
    atomic_torch_save(
        {
            "fingerprint": run.fingerprint,
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "rng": _rng_state(),
            "history": run.history,
        },
        run.ckpt_path,
    )


def finish_run(run: PredictorRun, decision: StopDecision) -> TrainResult:
    """The run's summary (written to training_summary.json on rank 0) and result."""
    args, ctx, history = run.args, run.ctx, run.history
    best = history[decision.best_epoch]
    uniform = uniform_cross_entropy(run.data.tokenizer.vocab_size)
    summary = {
        "model": run.kind,
        "preset": args.preset,
        "parameters": sum(p.numel() for p in run.model.parameters()),
        "config": run.model.config.to_dict(),
        "args": asdict(args),
        "data": run.data.stats,
        "vocab_size": run.data.tokenizer.vocab_size,
        "uniform_ce": uniform,
        "best_epoch": best["epoch"],
        "epochs_run": len(history),
        "stopped_by": decision.reason,
        "best": best,
        "seconds_total": round(sum(h["seconds"] for h in history), 3),
        "seconds_this_session": round(time.perf_counter() - run.started, 3),
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
        atomic_write_json(run.out / SUMMARY_FILE, summary)
        chance = 1 / max(1, run.data.tokenizer.vocab_size - 2)  # a uniform guess over the words
        logger.info(
            "%s: selected epoch %d of %d (stopped by %s): L_S(T) %.4f vs uniform ln|V| %.4f, token accuracy %.3f "
            "vs chance %.3f, exact states %.3f -> %s",
            run.label,
            best["epoch"],
            len(history),
            decision.reason,
            best["val_last_ce"],
            uniform,
            best["val_token_acc"],
            chance,
            best["val_exact_acc"],
            run.out,
        )
        if best["val_last_ce"] > 0.8 * uniform:
            logger.warning("%s: the validation loss is within 20%% of a uniform guess: the model learned little "
                           "(more data, or states the captioner is sure of, would help)", run.label)  # fmt: skip
    return TrainResult(run.kind, run.out, history, decision.best_epoch, decision.reason, summary, run.model)


def train_predictor(args: TrainArgs, on_epoch_end: EpochHook | None = None) -> dict[str, TrainResult]:
    """Train the model(s) of `args`; rerunning the same arguments resumes from out/checkpoint/last.pt."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    ctx = init_distributed(args.device)
    if not ctx.is_main:
        logging.getLogger("pipeline").setLevel(logging.WARNING)  # one copy of the progress lines
    set_determinism(ctx.device)
    out = Path(args.out)
    kinds = list(BOTH) if args.model == "both" else [args.model]
    dirs = {k: (out / k if args.model == "both" else out) for k in kinds}
    # A resumed run reuses the saved tokenizer, so its ids cannot drift from the checkpoint's.
    saved = next((d for d in dirs.values() if (d / CHECKPOINT_DIR / CHECKPOINT_FILE).is_file()), None)
    tokenizer = StateTokenizer.from_file(saved) if saved is not None else None
    if tokenizer is None and args.init_from is not None:
        # Weights taken over keep their ids: a tokenizer built afresh may number the same words differently.
        tokenizer = init_tokenizer(args.init_from)
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

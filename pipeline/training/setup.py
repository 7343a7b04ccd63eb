"""Setting a predictor run up: its processes and devices (single process or torchrun/DDP), the seeded randomness a
resumed run continues exactly, and its data (read, split by sequence, tokenized, cut into windows; a warning for a
corpus too small or too unsure to learn from)."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from pipeline.data import (
    ACTION_DROPOUT,
    WindowSet,
    cap_clips,
    cap_windows,
    corpus_actions,
    drop_actions,
    make_windows,
    read_sequences,
    split_sequences,
    val_window_cap,
)
from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.training.args import TrainArgs, preset_shape
from pipeline.utils import UserError, resolve_device

logger = logging.getLogger(__name__)


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


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    # One RNG stream per (run, epoch, process): dropout masks do not depend on what ran before an epoch, so a
    # resumed run (any number of processes) draws exactly what an uninterrupted one draws.
    return (seed * 1_000_003 + epoch * 1_009 + rank) % (2**63 - 1)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
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


def _prepare_action_slots(train: WindowSet, val: WindowSet, seed: int) -> None:
    """A seeded share of the training windows' actions read as unknown (ACTION_DROPOUT); the action after every
    target state is no target (the policy chose it, not the world)."""
    drop_actions(train, ACTION_DROPOUT, seed)
    for windows in (train, val):
        windows.ids[:, -1, -1] = PAD_ID


def _warn_cut(args: TrainArgs, stats: dict[str, Any], N: int, actions: bool) -> None:
    logger.warning(
        "%s: %d of %d states are longer than the %d token slots a state has (N=%d of --preset %s%s) and are "
        "cut, end mark included, so they can never be predicted whole; choose a preset with a larger N",
        args.data, stats["truncated_sentences"], stats["states"], N - actions, N, args.preset,
        ", one slot for the action" if actions else "",
    )  # fmt: skip


def prepare_data(args: TrainArgs, tokenizer: StateTokenizer | None = None) -> PreparedData:
    """Read, split by story (seeded), build the tokenizer over all sequences (as the paper does), make windows."""
    shape = preset_shape(args.preset)
    T, N = shape["T"], shape["N"]
    sequences = read_sequences(args.data, args.data_format)
    split = split_sequences(sequences, args.val_fraction, seed=args.seed)
    if tokenizer is None:
        tokenizer = StateTokenizer.build(
            (s for seq in sequences for s in seq.states),
            args.min_frequency,
            actions=corpus_actions(sequences),
        )
    # rollout-aware training: K more states per training window, the rolled-out context's true past (a memory
    # run rolls out from the clip's earlier windows instead, rollout_clip_windows)
    if args.min_history is not None and args.min_history > T:
        raise UserError(
            f"--min-history {args.min_history}: at most the window T={T} of --preset {args.preset}"
        )
    if args.min_history is not None and args.rollout_steps and not args.memory:
        raise UserError("--min-history does not combine with --rollout-steps without --memory")
    train = make_windows(
        split.train,
        tokenizer,
        T + (0 if args.memory else args.rollout_steps),
        N,
        min_history=args.min_history,
    )
    val = make_windows(split.val, tokenizer, T, N, min_history=args.min_history)
    if tokenizer.actions:
        _prepare_action_slots(train, val, args.seed)
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
    if stats["truncated_sentences"]:
        _warn_cut(args, stats, N, bool(tokenizer.actions))
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

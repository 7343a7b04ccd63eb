"""One optimisation step of a predictor run, whatever the model: the modules DistributedDataParallel wraps (a window's
loss, a tensor-memory segment of consecutive windows), the recall targets of the memory, truncated
back-propagation through a batch of clips, the learning-rate schedule, rollouts that put the model's own states
into its context (scheduled sampling), and the optimizer's parameter groups."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pipeline.data import (
    stack_clips,
)
from pipeline.training.args import RECALL_TARGETS, TrainArgs
from pipeline.training.schedule import warmup_cosine

logger = logging.getLogger(__name__)


class StepModule(nn.Module):
    """forward = training_step, so DistributedDataParallel's hooks see the loss computation."""

    def __init__(self, model: Any, last_only: bool = False) -> None:
        super().__init__()
        self.model = model
        self.last_only = last_only

    def forward(self, token_ids_full: torch.Tensor) -> torch.Tensor:
        if self.last_only:
            return self.model.training_step(token_ids_full, last_only=True)
        return self.model.training_step(token_ids_full)


class SegmentModule(nn.Module):
    """forward = a memory model's loss over consecutive windows of a batch of clips, state carried (one DDP
    forward per backward)."""

    def __init__(self, model: Any, last_only: bool = False, recall_weight: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.last_only = last_only
        self.recall_weight = recall_weight

    def forward(
        self, windows: torch.Tensor, lengths: list[int], state: Any, previous: torch.Tensor | None = None
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
            state = (
                st
                if state is None or n == state.h.shape[0]
                else MemoryState(torch.cat([st.h, state.h[n:]]), torch.cat([st.c, state.c[n:]]))
            )
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
    running = (
        windows[:, :, :-1].ne(0).flatten(2).any(-1)[..., None]
    )  # (B, K, 1) not a window past the clip's end
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
    step_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    group: list[torch.Tensor],
    bptt_windows: int,
    device: torch.device | str,
    rollout: Callable[[torch.Tensor, list[int]], torch.Tensor] | None = None,
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
        loss_sum, count, state = step_module(
            windows[:, j : j + bptt_windows], part, state, previous[:, j : j + bptt_windows]
        )
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
def rollout_clip_windows(
    model: Any, windows: torch.Tensor, lengths: list[int], K: int, prob: float
) -> torch.Tensor:
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


def parameter_groups(model: nn.Module, args: TrainArgs) -> list[dict[str, Any]]:
    """One AdamW group, or with --memory-lr-scale != 1 a second group for the memory (interface and taps) at
    lr * memory_lr_scale."""
    params = list(model.named_parameters())
    if not args.memory or args.memory_lr_scale == 1.0:
        return [{"params": [p for _, p in params]}]
    is_mem = lambda name: name.startswith(("memory.", "memory_taps."))  # noqa: E731
    return [
        {"params": [p for n, p in params if not is_mem(n)]},
        {"params": [p for n, p in params if is_mem(n)], "lr": args.lr * args.memory_lr_scale},
    ]

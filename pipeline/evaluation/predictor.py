"""Scoring a saved predictor on state-sequence windows: selection loss, L_S(T), token and exact-sentence
accuracy. `evaluate` is what every training epoch reports; `evaluate_predictor` is `semworld eval predictor`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pipeline import data as seqdata
from pipeline.tokenizer import load_tokenizer
from pipeline.utils import UserError, resolve_device

SCORE_KEYS = (
    "selection_loss_sum",
    "selection_count",
    "last_ce_sum",
    "last_tokens",
    "last_correct",
    "exact_sentences",
    "sentences",
)


def _summary(sums: dict[str, float]) -> dict[str, float]:
    """Summed scores (SCORE_KEYS) -> the means and counts that evaluate() and evaluate_clips() report."""
    return {
        "selection_loss": sums["selection_loss_sum"] / max(sums["selection_count"], 1.0),
        "last_ce": sums["last_ce_sum"] / max(sums["last_tokens"], 1.0),
        "token_acc": sums["last_correct"] / max(sums["last_tokens"], 1.0),
        "exact_acc": sums["exact_sentences"] / max(sums["sentences"], 1.0),
        "last_tokens": int(sums["last_tokens"]),
        "sentences": int(sums["sentences"]),
    }


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
    return _summary(sums)


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
        windows, lengths = seqdata.stack_clips(clips[i : i + batch_size])
        windows = windows.to(device)
        state = None
        for j in range(windows.shape[1]):
            n = sum(1 for L in lengths if L > j)
            st = None if state is None else MemoryState(state.h[:n], state.c[:n])
            part, st = model.score_memory(windows[:n, j], st)
            for key in SCORE_KEYS:
                sums[key] += float(part[key])
            state = (
                st
                if state is None or n == state.h.shape[0]
                else MemoryState(torch.cat([st.h, state.h[n:]]), torch.cat([st.c, state.c[n:]]))
            )
    model.train(was_training)
    return _summary(sums)


def evaluate_predictor(
    weights: str | Path,
    data: str | Path,
    split: str = "all",
    data_format: str | None = None,
    batch_size: int = 64,
    device: str = "auto",
) -> dict[str, Any]:
    """Load weights + tokenizer from `weights`, window `data` at the model's T and N, and score them."""
    from models.hub import load_predictor

    weights = Path(weights)
    dev = resolve_device(device)
    model: Any = load_predictor(weights, map_location=dev)
    tokenizer = load_tokenizer(weights)
    cfg = model.config
    if cfg.vocab_size != tokenizer.vocab_size:
        raise UserError(
            f"{weights}: tokenizer.json has {tokenizer.vocab_size} tokens, the model {cfg.vocab_size}"
        )
    sequences = seqdata.read_sequences(data, data_format)
    max_windows = None
    if split == "val":
        summary_path = weights / seqdata.SUMMARY_FILE
        if not summary_path.is_file():
            raise UserError(
                f"{weights}: no {seqdata.SUMMARY_FILE}, so the validation split is unknown; use --split all"
            )
        recorded = json.loads(summary_path.read_text())["split"]
        sequences = seqdata.split_sequences(sequences, recorded["val_fraction"], seed=recorded["seed"]).val
        if recorded.get("max_windows") is not None:
            max_windows = seqdata.val_window_cap(recorded["max_windows"], recorded["val_fraction"])
    windows = seqdata.make_windows(sequences, tokenizer, cfg.T, cfg.N)
    memory = getattr(model, "memory", None) is not None
    if split == "val" and max_windows is not None:
        cap = seqdata.cap_clips if memory else seqdata.cap_windows  # a memory run validated on whole clips
        windows = cap(windows, max_windows, recorded["seed"] + 1)
    if len(windows) == 0:
        raise UserError(f"{data}: no windows (every sequence needs at least T+1={cfg.T + 1} states)")
    if memory:  # each clip's windows in order, (h, c) carried, as the trainer validates
        metrics = evaluate_clips(model, seqdata.clip_windows(windows), batch_size, dev)
    else:
        metrics = evaluate(model, windows.ids, batch_size, dev)
    kind = json.loads((weights / "config.json").read_text()).get("semworld_model")
    return {
        "model": kind,
        "weights": str(weights),
        "data": str(data),
        "split": split,
        "L_S(T)": metrics["last_ce"],
        "token_acc": metrics["token_acc"],
        "exact_acc": metrics["exact_acc"],
        "selection_loss": metrics["selection_loss"],
        "uniform_ce": seqdata.uniform_cross_entropy(tokenizer.vocab_size),
        "vocab_size": tokenizer.vocab_size,
        "last_tokens": metrics["last_tokens"],
        "sentences": metrics["sentences"],
        **{k: v for k, v in windows.stats().items() if k != "states"},
    }

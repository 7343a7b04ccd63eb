"""Predictor data: readers for state sequences (JSONL, ROCStories CSV), a seeded split by story, and windows.

A window is T+1 consecutive states encoded to N ids each, shape (T+1, N); a batch of windows is (B, T+1, N).
A corpus whose records carry "actions" (one word per state: the action taken after it) trains a predictor that
forecasts under actions: each state's last slot holds its action (pipeline/tokenizer.py).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipeline.tokenizer import PAD_ID, StateTokenizer
from pipeline.utils import UserError

logger = logging.getLogger(__name__)

FORMATS = ("jsonl", "rocstories")
ROC_SENTENCES = tuple(f"sentence{i}" for i in range(1, 6))
# Written by the trainer beside the weights; records the split that `semworld eval predictor --split val` rebuilds.
SUMMARY_FILE = "training_summary.json"
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "rocstories"}
# Share of the training windows' action slots blanked (read as "unknown"), so that a forecast from a history
# whose actions are partly unknown reads inputs the predictor has seen.
ACTION_DROPOUT = 0.1


@dataclass
class StateSequence:
    """One clip or story: its states in order, an id (for the split) and any other keys of the record."""

    id: str
    states: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


# ---- readers -------------------------------------------------------------------------------------------
def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """`fmt` if given, else by extension: .jsonl/.ndjson/.json -> jsonl, .csv -> rocstories."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise UserError(
            f"{path}: cannot tell the format from the extension {suffix or '(none)'!r}; "
            f"use .jsonl or .csv, or pass --format {'|'.join(FORMATS)}"
        )
    return _EXTENSIONS[suffix]


def read_sequences(path: str | Path, fmt: str | None = None) -> list[StateSequence]:
    """Read every sequence of a JSONL or ROCStories CSV file. Bad contents -> UserError naming file and line."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a .jsonl or .csv file")
    kind = detect_format(path, fmt)
    sequences = read_jsonl(path) if kind == "jsonl" else read_rocstories(path)
    if not sequences:
        raise UserError(f"{path}: contains no sequences")
    return sequences


def read_jsonl(path: str | Path) -> list[StateSequence]:
    """One JSON object per line with "states": [sentence, ...]; other keys kept in `extra`; blank lines skipped."""
    path = Path(path)
    out: list[StateSequence] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(
                    f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno})"
                ) from None
            if not isinstance(record, dict):
                raise UserError(
                    f'{path}:{lineno}: expected a JSON object with a "states" list, '
                    f"got {type(record).__name__}"
                )
            states = record.pop("states", None)
            if not isinstance(states, list) or not states:
                raise UserError(f'{path}:{lineno}: "states" must be a non-empty list of sentences')
            bad = [i for i, s in enumerate(states) if not isinstance(s, str)]
            if bad:
                raise UserError(
                    f"{path}:{lineno}: state {bad[0]} is {type(states[bad[0]]).__name__}, expected a string"
                )
            seq_id = str(record.get("id", record.get("storyid", f"line{lineno}")))
            out.append(StateSequence(id=seq_id, states=states, extra=record))
    return out


def read_rocstories(path: str | Path) -> list[StateSequence]:
    """The ROCStories CSV layout: storyid, storytitle, sentence1..sentence5 (a header row names them)."""
    path = Path(path)
    out: list[StateSequence] = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in ("storyid", *ROC_SENTENCES) if c not in header]
        if missing:
            raise UserError(
                f"{path}:1: ROCStories header lacks {', '.join(missing)} "
                f"(expected storyid, storytitle, sentence1..sentence5)"
            )
        for row in reader:
            lineno = reader.line_num
            if None in row:  # more cells than header columns
                raise UserError(
                    f"{path}:{lineno}: {len(header) + len(row[None])} cells, header has {len(header)}"
                )
            states = [(row.get(c) or "").strip() for c in ROC_SENTENCES]
            empty = [c for c, s in zip(ROC_SENTENCES, states) if not s]
            if empty:
                raise UserError(f"{path}:{lineno}: empty {', '.join(empty)}")
            story_id = (row.get("storyid") or "").strip() or f"line{lineno}"
            extra = {"storytitle": row["storytitle"]} if row.get("storytitle") else {}
            out.append(StateSequence(id=story_id, states=states, extra=extra))
    return out


# ---- split ---------------------------------------------------------------------------------------------
@dataclass
class Split:
    train: list[StateSequence]
    val: list[StateSequence]
    test: list[StateSequence] = field(default_factory=list)


def split_sequences(
    sequences: Sequence[StateSequence], val_fraction: float = 0.05, seed: int = 0, test_fraction: float = 0.0
) -> Split:
    """Shuffle whole sequences with `seed` and cut them into train/val/test, so no story spans two splits.

    A nonzero fraction always gets at least one sequence, and train keeps at least one.
    """
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {frac}")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got {val_fraction + test_fraction}")
    n = len(sequences)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val = max(1, round(n * val_fraction)) if val_fraction > 0 else 0
    n_test = max(1, round(n * test_fraction)) if test_fraction > 0 else 0
    if n - n_val - n_test < 1:
        raise UserError(f"{n} sequences are too few to split (val {n_val}, test {n_test}, train none)")
    val = [sequences[i] for i in order[:n_val]]
    test = [sequences[i] for i in order[n_val : n_val + n_test]]
    train = [sequences[i] for i in order[n_val + n_test :]]
    return Split(train=train, val=val, test=test)


# ---- windows -------------------------------------------------------------------------------------------
@dataclass
class WindowSet:
    """Windows of T+1 states, `ids` (W, T+1, N), and where each came from."""

    ids: torch.Tensor  # (W, T+1, N) int64
    sequence_index: torch.Tensor  # (W,) index into the sequences the windows were made from
    start: torch.Tensor  # (W,) index of the window's first state in its sequence
    states: int  # states encoded (each counted once, however many windows share it)
    truncated: int  # states longer than N tokens, cut to N
    skipped: int  # sequences shorter than T+1 states (no window)

    def __len__(self) -> int:
        return self.ids.shape[0]

    @property
    def pad_fraction(self) -> float:
        return float((self.ids == PAD_ID).float().mean()) if self.ids.numel() else 0.0

    def stats(self) -> dict[str, float | int]:
        return {
            "windows": len(self),
            "pad_fraction": round(self.pad_fraction, 4),
            "states": self.states,
            "truncated_sentences": self.truncated,
            "skipped_sequences": self.skipped,
        }

    def subset(self, index: torch.Tensor) -> WindowSet:
        return WindowSet(
            self.ids[index],
            self.sequence_index[index],
            self.start[index],
            self.states,
            self.truncated,
            self.skipped,
        )


def make_windows(
    sequences: Sequence[StateSequence],
    tokenizer: StateTokenizer,
    T: int,
    N: int,
    min_history: int | None = None,
) -> WindowSet:
    """Slide a window of T+1 states with stride 1 over each sequence (L states give max(0, L-T) windows).

    A ROCStories story (5 sentences) gives exactly one window when T = 4. With min_history = m < T, each
    sequence is first front-padded with T - m all-padding states, so that the first windows hold only m true
    states before their target, as `Predictor.predict` lays out a history shorter than T (L states then give
    max(0, L-m) windows; padding states are masked in attention and write nothing to a memory).
    """
    if T < 1 or N < 1:
        raise ValueError(f"T and N must be >= 1, got T={T}, N={N}")
    if min_history is not None and not 1 <= min_history <= T:
        raise ValueError(f"min_history must be in 1..T={T}, got {min_history}")
    pad = 0 if min_history is None else T - min_history
    chunks: list[torch.Tensor] = []
    seq_index: list[int] = []
    starts: list[int] = []
    n_states = truncated = skipped = 0
    for i, seq in enumerate(sequences):
        actions = seq.extra.get("actions") if tokenizer.actions else None
        if tokenizer.actions and not isinstance(actions, list):
            raise UserError(
                f'sequence {seq.id}: no "actions" list, and the predictor forecasts under actions'
            )
        try:
            enc = tokenizer.encode_states(seq.states, N, actions)
        except ValueError as err:
            raise UserError(f"sequence {seq.id}: {err}") from None
        n_states += len(seq.states)
        truncated += enc.truncated
        n_windows = len(seq.states) + pad - T
        if n_windows < 1:
            skipped += 1
            continue
        ids = enc.ids
        if pad:  # (pad + L, N): empty states in front
            ids = torch.cat([torch.full((pad, ids.shape[1]), PAD_ID, dtype=ids.dtype), ids])
        # unfold: (L, N) -> (L-T, N, T+1) -> (L-T, T+1, N)
        chunks.append(ids.unfold(0, T + 1, 1).permute(0, 2, 1))
        seq_index += [i] * n_windows
        starts += list(range(n_windows))
    ids = torch.cat(chunks) if chunks else torch.zeros((0, T + 1, N), dtype=torch.long)
    ws = WindowSet(
        ids=ids.contiguous(),
        sequence_index=torch.tensor(seq_index, dtype=torch.long),
        start=torch.tensor(starts, dtype=torch.long),
        states=n_states,
        truncated=truncated,
        skipped=skipped,
    )
    if skipped:
        logger.info(
            "%d of %d sequences have fewer than %d states and give no window",
            skipped,
            len(sequences),
            T + 1 - pad,
        )
    return ws


def corpus_actions(sequences: Sequence[StateSequence]) -> list[str]:
    """The action words of a corpus (sorted), [] when no record carries "actions"."""
    words: set[str] = set()
    for seq in sequences:
        acts = seq.extra.get("actions")
        if acts is None:
            continue
        if not isinstance(acts, list) or not all(isinstance(a, str) and a.strip() for a in acts):
            raise UserError(f'sequence {seq.id}: "actions" must be a list of words, one per state')
        words.update(a.strip().lower() for a in acts)
    return sorted(words)


def drop_actions(windows: WindowSet, p: float, seed: int) -> WindowSet:
    """Blank (PAD) a seeded share p of the windows' action slots, the last slot of every state (in place)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(windows.ids.shape[:2], generator=g) < p  # (W, T+1)
    windows.ids[..., -1][mask] = PAD_ID
    return windows


def cap_windows(windows: WindowSet, limit: int | None, seed: int) -> WindowSet:
    """At most `limit` windows, chosen with a seeded generator (order kept)."""
    if limit is None or len(windows) <= limit:
        return windows
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(windows), generator=g)[:limit].sort().values
    return windows.subset(keep)


def uniform_cross_entropy(vocab_size: int) -> float:
    """ln |V|: the cross-entropy of a uniform guess over the vocabulary."""
    return math.log(vocab_size)


def val_window_cap(max_windows: int, val_fraction: float) -> int:
    """Validation windows kept when training windows are capped at max_windows (the same proportion)."""
    return max(1, math.ceil(max_windows * val_fraction / (1.0 - val_fraction)))


# ---- whole clips (the tensor memory trains and scores a clip's windows in order) -------------------------
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


def stack_clips(group: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """Clips (n_i, T+1, N), longest first -> (B, max n_i, T+1, N) zero-padded at the end, and the n_i."""
    group = sorted(group, key=lambda w: -w.shape[0])
    lengths = [w.shape[0] for w in group]
    out = group[0].new_zeros(len(group), lengths[0], *group[0].shape[1:])
    for b, w in enumerate(group):
        out[b, : w.shape[0]] = w
    return out, lengths

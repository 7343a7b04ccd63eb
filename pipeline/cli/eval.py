"""`semworld eval predictor`: score saved weights (either model kind) on state sequences.

Prints L_S(T), token accuracy, exact-sentence accuracy and the selection loss, beside the uniform ln|V|.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from pipeline.data import cap_windows, make_windows, read_sequences, split_sequences, uniform_cross_entropy
from pipeline.evaluation import world as eval_world
from pipeline.tokenizer import load_tokenizer
from pipeline.training.predictor import (
    SUMMARY_FILE,
    cap_clips,
    clip_windows,
    evaluate,
    evaluate_clips,
    resolve_device,
    val_window_cap,
)
from pipeline.utils import UserError

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval` and its `predictor` subcommand."""
    ev = sub.add_parser("eval", help="evaluate a model")
    ev_sub = ev.add_subparsers(dest="eval_what", metavar="WHAT")
    ev.set_defaults(func=lambda args: (ev.print_help(), 2)[1])
    eval_world.add_parser(ev_sub)  # `semworld eval world`: all three shipped stages on a generated world split

    p = ev_sub.add_parser(
        "predictor",
        help="score a trained predictor on state sequences",
        description="L_S(T), token and exact-sentence accuracy of saved predictor weights.",
    )
    p.add_argument(
        "--weights", required=True, help="directory with config.json, model.safetensors, tokenizer.json"
    )
    p.add_argument("--data", required=True, help=".jsonl state sequences or ROCStories .csv")
    p.add_argument("--format", dest="data_format", choices=("jsonl", "rocstories"), default=None)
    p.add_argument(
        "--split",
        choices=("val", "all"),
        default="all",
        help="val: the validation split recorded in training_summary.json; all: every window",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_eval_predictor)


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
    sequences = read_sequences(data, data_format)
    max_windows = None
    if split == "val":
        summary_path = weights / SUMMARY_FILE
        if not summary_path.is_file():
            raise UserError(
                f"{weights}: no {SUMMARY_FILE}, so the validation split is unknown; use --split all"
            )
        recorded = json.loads(summary_path.read_text())["split"]
        sequences = split_sequences(sequences, recorded["val_fraction"], seed=recorded["seed"]).val
        if recorded.get("max_windows") is not None:
            max_windows = val_window_cap(recorded["max_windows"], recorded["val_fraction"])
    windows = make_windows(sequences, tokenizer, cfg.T, cfg.N)
    memory = getattr(model, "memory", None) is not None
    if split == "val" and max_windows is not None:
        cap = cap_clips if memory else cap_windows  # a memory run validated on whole clips
        windows = cap(windows, max_windows, recorded["seed"] + 1)
    if len(windows) == 0:
        raise UserError(f"{data}: no windows (every sequence needs at least T+1={cfg.T + 1} states)")
    if memory:  # each clip's windows in order, (h, c) carried, as the trainer validates
        metrics = evaluate_clips(model, clip_windows(windows), batch_size, dev)
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
        "uniform_ce": uniform_cross_entropy(tokenizer.vocab_size),
        "vocab_size": tokenizer.vocab_size,
        "last_tokens": metrics["last_tokens"],
        "sentences": metrics["sentences"],
        **{k: v for k, v in windows.stats().items() if k != "states"},
    }


def run_eval_predictor(ns: argparse.Namespace) -> int:
    result = evaluate_predictor(ns.weights, ns.data, ns.split, ns.data_format, ns.batch_size, ns.device)
    if ns.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{result['model']} predictor, {result['split']} windows",
        caption=f"weights {result['weights']}, data {result['data']}",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, fmt in (
        ("L_S(T)", ".4f"),
        ("uniform_ce", ".4f"),
        ("token_acc", ".4f"),
        ("exact_acc", ".4f"),
        ("selection_loss", ".4f"),
        ("windows", "d"),
        ("last_tokens", "d"),
        ("pad_fraction", ".4f"),
        ("truncated_sentences", "d"),
        ("vocab_size", "d"),
    ):
        label = "uniform ln|V|" if key == "uniform_ce" else key
        table.add_row(label, format(result[key], fmt))
    Console().print(table)
    return 0

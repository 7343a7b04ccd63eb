"""`semworld eval predictor`: score saved weights (either model kind) on state sequences.

Prints L_S(T), token accuracy, exact-sentence accuracy and the selection loss, beside the uniform ln|V|.
"""

from __future__ import annotations

import argparse
import json
import logging

from pipeline.evaluation import world as eval_world
from pipeline.evaluation.predictor import evaluate_predictor

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

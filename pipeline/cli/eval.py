"""`semworld eval predictor` (L_S(T), token and exact-sentence accuracy and the selection loss of saved weights on
state sequences, beside the uniform ln|V|) and `semworld eval world` (the three stages on a generated world
split) and `semworld eval compare` (semworld against a pixel-space predictor): argparse and the printed
tables; the scoring lives in pipeline.evaluation."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from typing import Any

from pipeline.cli.eval_actions import add_actions_parser
from pipeline.cli.eval_plan import add_plan_parser
from pipeline.cli.flags import add_command, add_result_flags, add_sticky_flag, emit_result
from pipeline.evaluation.world import PARTS, EvalWorldArgs
from pipeline.utils import UserError, default_weights_dir

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `eval` and its `predictor` subcommand."""
    ev = sub.add_parser("eval", help="evaluate a model")
    ev_sub = ev.add_subparsers(dest="eval_what", metavar="WHAT")
    ev.set_defaults(func=lambda args: (ev.print_help(), 2)[1])
    add_world_parser(ev_sub)  # `semworld eval world`: all three shipped stages on a generated world split
    add_compare_parser(ev_sub)  # `semworld eval compare`: semworld against the pixel-space baseline
    add_actions_parser(ev_sub)  # `semworld eval actions`: a predictor with actions in its domain's emulator
    add_plan_parser(ev_sub)  # `semworld eval plan`: the planner playing whole games in the emulator

    p = add_command(ev_sub, "predictor", run_eval_predictor)
    p.add_argument(
        "--weights", required=True, help="directory with config.json, model.safetensors, tokenizer.json"
    )
    p.add_argument("--data", required=True, help=".jsonl state sequences or ROCStories .csv")
    p.add_argument("--format", dest="data_format", choices=("jsonl", "rocstories"), default=None,
                   help="the format of --data (default: from its extension)")  # fmt: skip
    p.add_argument(
        "--split",
        choices=("val", "all"),
        default="all",
        help="val: the validation split recorded in training_summary.json; all: every window (default %(default)s)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, help="windows per forward pass (default %(default)s)"
    )
    p.add_argument(
        "--device", default="auto", help="auto (cuda if available), cpu, cuda, ... (default %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_eval_predictor(ns: argparse.Namespace) -> int:
    """Score a trained predictor on state sequences.

    L_S(T), token and exact-sentence accuracy of saved predictor weights."""
    from pipeline.evaluation.predictor import evaluate_predictor

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


def add_world_parser(eval_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `world` to `semworld eval`; its func prints a report (or one JSON object) and returns 0."""
    p = add_command(eval_subparsers, "world", run_eval_world)
    p.add_argument("--data", required=True, help="directory made by `semworld world generate`")
    p.add_argument(
        "--weights", default=None, help="weights folder (default: $SEMWORLD_WEIGHTS_DIR or weights/)"
    )
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated stages to score (default: all)")
    p.add_argument("--horizon", type=int, default=8, help="predictor horizons 1..H (default %(default)s)")
    p.add_argument("--max-frames", type=int, default=None, help="cap on frames the captioner reads")
    p.add_argument(
        "--render-states", type=int, default=32, help="distinct states rendered (default %(default)s)"
    )
    p.add_argument("--steps", type=int, default=None, help="renderer denoising steps (default: its own)")
    p.add_argument("--guidance", type=float, default=None, help="renderer guidance (default: its own)")
    p.add_argument("--seed", type=int, default=0, help="renderer noise seed (default %(default)s)")
    p.add_argument(
        "--device", default="auto", help="auto (cuda if available), cpu, cuda, ... (default %(default)s)"
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    p.add_argument(
        "--no-project",
        dest="project",
        action="store_false",
        help="score the predictor's raw argmax states, without projecting them onto the valid states of "
        "the domain (default: project)",
    )
    p.add_argument(
        "--mirror",
        action="store_true",
        help="score the predictor averaged with its left-right mirror (pipeline/symmetry.py)",
    )
    p.add_argument(
        "--min-history",
        type=int,
        default=None,
        help="roll out from every true history of at least this many states (default: the "
        "predictor's window, at most 4)",
    )
    p.add_argument(
        "--domain",
        default=None,
        help="the domain of the data (default: the one the weights' model_index.json names)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run_eval_world(ns: argparse.Namespace) -> int:
    """Score the shipped (or given) models on a `world generate` directory.

    Captioner exact match, predictor exact match by horizon (on the steps the history determines) and the
    renderer round trip with PSNR/SSIM, on a directory made by `semworld world generate`."""
    args = EvalWorldArgs(
        data=ns.data,
        weights=ns.weights or str(default_weights_dir()),
        parts=tuple(p.strip() for p in ns.parts.split(",") if p.strip()),
        horizon=ns.horizon,
        max_frames=ns.max_frames,
        render_states=ns.render_states,
        steps=ns.steps,
        guidance=ns.guidance,
        seed=ns.seed,
        device=ns.device,
        threads=ns.threads,
        project=ns.project,
        mirror=ns.mirror,
        min_history=ns.min_history,
        domain=ns.domain,
    )
    from pipeline.evaluation.world import evaluate_world

    result = evaluate_world(args)
    if ns.json:
        print(json.dumps(result))
        return 0
    write_report(result)
    return 0


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _predictor_table(result: dict[str, Any], res: dict[str, Any]) -> Any:
    """The predictor's rich table: exact match by horizon on the targets the history determines (all, each
    family, copy-last, counts), then the flagged steps after a random event and all flagged steps."""
    from rich.table import Table

    h = len(res["by_horizon"])
    table = Table(
        title=f"predictor ({res['model']}) exact match by horizon, on the steps the history determines "
        f"(rolled out from {res['rollouts']} true histories)"
    )
    table.add_column("")
    for k in range(1, h + 1):
        table.add_column(str(k), justify="right")

    def row(label: str, rates: dict[str, Any]) -> None:
        table.add_row(label, *(_fmt(rates.get(str(k))) for k in range(1, h + 1)))

    row("all", res["by_horizon"])
    for fam, rates in res["by_family"].items():
        row(fam, rates)
    row("copy-last", result.get("copy_last", {}).get("by_horizon", {}))
    row("targets", res["steps"])
    table.add_section()
    # the flagged steps after a random event inside the rollout: no history determines them
    row("after event", res["by_horizon_after_event"])
    row("  targets", res["after_event_steps"])
    row("all flagged", res["by_horizon_flagged"])
    return table


def write_report(result: dict[str, Any]) -> None:
    """Rich tables of an `evaluate_world` result on stdout."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{result['data']}[/]: {result['clips']} clips, {result['states']} states; "
        f"weights {result['weights']}"
    )
    for part in PARTS:
        res = result.get(part)
        if res is None:
            continue
        if "skipped" in res:
            console.print(f"{part}: skipped ({res['skipped']})")
            continue
        if part == "predictor":
            console.print(_predictor_table(result, res))
            projected = (
                f", projected onto the grammar: {_fmt(res.get('projected'))} of predicted states changed"
                if res.get("projection")
                else ", not projected"
            )
            worst = min((v for v in res["valid_by_horizon"].values() if v is not None), default=None)
            mirror = "; averaged with its left-right mirror (--mirror)" if res.get("mirror") else ""
            console.print(
                f"valid states: {_fmt(res['valid_h1'])} at h = 1, {_fmt(worst)} at the worst horizon"
                f"{projected}{mirror}"
            )
            continue
        table = Table(title=part)
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in res.items():
            table.add_row(key, json.dumps(value) if isinstance(value, dict) else _fmt(value))
        console.print(table)


def add_compare_parser(eval_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `compare` to `semworld eval`: semworld, semworld on true states, the pixel model, copy-last, truth."""
    p = add_command(eval_subparsers, "compare", run_eval_compare)
    p.add_argument(
        "--domain",
        default="shapes",
        help="shapes (world clips, --data) or a game: pong (default %(default)s)",
    )
    p.add_argument(
        "--data", default=None, help="shapes: a `semworld world generate --split test --length 12` directory"
    )
    p.add_argument(
        "--episodes", type=int, default=48, help="a game: held-out test episodes (default %(default)s)"
    )
    add_sticky_flag(p)
    p.add_argument(
        "--weights", default=None, help="weights folder (default: $SEMWORLD_WEIGHTS_DIR or weights/)"
    )
    p.add_argument(
        "--pixel",
        default=None,
        help="saved pixel model (or a `semworld train pixel` run folder); a game: "
        "optional (without it, semworld against copy-last)",
    )
    p.add_argument("--clips", type=int, default=None, help="use the first N usable clips (default: all)")
    p.add_argument("--horizon", type=int, default=8, help="frames predicted (default %(default)s)")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="states before the first forecast step, the same for every method (default: the pixel "
        "model's context; the predictor reads them all, front-padded to its window)",
    )
    p.add_argument("--steps", type=int, default=None, help="renderer denoising steps (default: its own)")
    p.add_argument("--seed", type=int, default=0, help="renderer noise seed (default %(default)s)")
    p.add_argument("--figures", default=None, help="folder for the horizon plot and the frame grid (PNG)")
    p.add_argument(
        "--prefix", default="semantic_vs_pixel", help="figure file-name prefix (default %(default)s)"
    )
    p.add_argument("--grid-clips", type=int, default=3, help="clips in the frame grid (default %(default)s)")
    p.add_argument(
        "--cache",
        default=None,
        help="folder keeping semworld's, copy-last's and the truth's frames "
        "between runs (a retrained pixel model is compared without rendering again)",
    )
    p.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    add_result_flags(p)
    p.add_argument("--markdown", default=None, help="also write the tables as Markdown to this file")
    return p


def run_eval_compare(ns: argparse.Namespace) -> int:
    """Semworld against the pixel-space predictor, on world test clips or a game's episodes.

    From the same context frames, h = 1..H: state exact match and object accuracy of each method's frames read
    back by the captioner, PSNR/SSIM/MSE/MAE per pixel, by family. With --domain GAME (pong): held-out emulator
    episodes under the logged actions and under each action held, the objects' distance from the truth in pixels,
    and the counterfactual rate."""
    from pipeline.evaluation.compare import CompareArgs, compare

    if ns.domain != "shapes":
        from pipeline.cli.eval_compare_game import run_game_compare

        return run_game_compare(ns)
    if not ns.data or not ns.pixel:
        raise UserError("eval compare on the built-in world needs --data and --pixel")

    args = CompareArgs(
        data=ns.data, weights=ns.weights or str(default_weights_dir()), pixel=ns.pixel, clips=ns.clips,
        horizon=ns.horizon, steps=ns.steps, seed=ns.seed, figures=ns.figures, prefix=ns.prefix,
        grid_clips=ns.grid_clips, cache=ns.cache, device=ns.device, threads=ns.threads, context=ns.context,
    )  # fmt: skip
    from pipeline.evaluation.compare import markdown_tables

    return report_compare(ns, compare(args), markdown_tables, write_compare_report)


def report_compare(
    ns: argparse.Namespace,
    result: dict[str, Any],
    markdown: Callable[[dict[str, Any]], str],
    tables: Callable[[dict[str, Any]], None],
) -> int:
    """A comparison's result: into --out (JSON) and --markdown when given, then printed as JSON or as tables."""
    from pipeline.utils import atomic_write_text

    def write_markdown() -> None:
        if ns.markdown:
            atomic_write_text(ns.markdown, markdown(result))

    return emit_result(ns, result, lambda: tables(result), then_write=write_markdown)


def write_compare_report(result: dict[str, Any]) -> None:
    """Rich tables of a `compare` result: each measure by method and horizon, exact match by family, timing."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.evaluation.compare import METHODS

    console = Console()
    h = result["horizon"]
    console.print(f"[bold]{result['data']}[/]: {result['clips']} clips {result['families']}, context "
                  f"{result['context']} frames; weights {result['weights']}, pixel {result['pixel']}")  # fmt: skip
    for key, title in (("exact", "state exact match of the frames (captioned)"),
                       ("object_acc", "objects read back exactly"), ("lost", "true objects lost"),
                       ("invented", "objects invented per frame"), ("psnr", "PSNR (dB)"), ("ssim", "SSIM"),
                       ("mse", "MSE per pixel ([0, 1] values)"), ("mae", "MAE per pixel")):  # fmt: skip
        table = Table(title=title)
        table.add_column("method")
        for k in range(1, h + 1):
            table.add_column(f"h={k}", justify="right")
        table.add_column("all", justify="right")
        for method in METHODS:
            res = result["methods"][method]
            table.add_row(method, *(_fmt(res["by_horizon"][str(k)].get(key)) for k in range(1, h + 1)),
                          _fmt(res["all"].get(key)))  # fmt: skip
        console.print(table)
    for fam in sorted(next(iter(result["methods"].values()))["by_family"]):
        table = Table(title=f"state exact match, {fam}")
        table.add_column("method")
        for k in range(1, h + 1):
            table.add_column(f"h={k}", justify="right")
        for method in METHODS:
            row = result["methods"][method]["by_family"][fam]
            table.add_row(method, *(_fmt(row[str(k)].get("exact")) for k in range(1, h + 1)))
        console.print(table)
    console.print("seconds per predicted frame: " + ", ".join(
        f"{k} {v:.4f}" for k, v in result["seconds_per_frame"].items()))  # fmt: skip

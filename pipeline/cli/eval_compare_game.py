"""`semworld eval compare --domain GAME`: the comparison on a game's held-out emulator episodes
(pipeline.evaluation.game_compare), its printed tables, JSON, Markdown and figures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeline.utils import UserError, default_weights_dir

MEASURES = (("exact", "state exact match of the drawn frames (read back)"),
            ("position_px", "objects' distance from the truth (screen pixels)"),
            ("psnr", "PSNR (dB)"), ("ssim", "SSIM"))  # fmt: skip


def run_game_compare(ns: argparse.Namespace) -> int:
    import torch

    from pipeline.domain import can_generate, get_domain
    from pipeline.evaluation.game_compare import (
        compare_game,
        frame_grid,
        load_game_stages,
        plot_game_horizons,
    )

    domain = get_domain(ns.domain)
    if not hasattr(domain, "simulator") or not can_generate(domain):
        raise UserError(
            f"--domain {ns.domain}: eval compare reads the built-in world or a game with an emulator"
        )
    if ns.episodes < 1 or ns.horizon < 1:
        raise UserError("--episodes and --horizon must be >= 1")
    if ns.threads:
        torch.set_num_threads(ns.threads)
    weights = ns.weights or str(default_weights_dir())
    stages = load_game_stages(weights, ns.pixel, domain, device=ns.device)
    result, eps, frames = compare_game(stages, domain, episodes=ns.episodes, horizon=ns.horizon, seed=ns.seed,
                                       sticky=ns.sticky)  # fmt: skip
    result.update(weights=weights, pixel=ns.pixel)
    if ns.figures:
        folder = Path(ns.figures)
        prefix = ns.prefix if ns.prefix != "semantic_vs_pixel" else f"{domain.name}_vs_pixel"
        result["figures"] = [str(plot_game_horizons(result, folder / f"{prefix}_horizon.png")),
                             str(frame_grid(eps, frames["logged"], folder / f"{prefix}_grid.png"))]  # fmt: skip
    from pipeline.cli.eval import report_compare

    return report_compare(ns, result, markdown_tables, print_tables)


def _rows(result: dict[str, Any], key: str) -> list[tuple[str, list[float]]]:
    return [(m, scores[key]) for m, scores in result["logged"].items()]


def markdown_tables(result: dict[str, Any]) -> str:
    """The measures by method at h = 1, 2, 4, 8, 16 and averaged, and the counterfactual rates, as Markdown."""
    hs = [h for h in (1, 2, 4, 8, 16) if h <= result["horizon"]]
    out = []
    for key, title in MEASURES:
        out += [f"**{title}**", "", "| method | " + " | ".join(f"h={h}" for h in hs) + " | mean | mean h>=4 |",
                "|---" * (len(hs) + 3) + "|"]  # fmt: skip
        for method, values in _rows(result, key):
            summary = result["summary"][method]
            cells = [f"{values[h - 1]:.3f}" for h in hs]
            out.append(f"| {method} | " + " | ".join(cells) + f" | {summary[key + '_mean']:.3f} | "
                       f"{summary.get(key + '_h4+', float('nan')):.3f} |")  # fmt: skip
        out.append("")
    out += [f"**held actions (all up, all down, all stay): the {result['controlled_noun']} moves as in the emulator / "
            "exact state**", "",
            "| method | direction | exact |", "|---|---|---|"]  # fmt: skip
    for method, summary in result["summary"].items():
        if "counterfactual_direction" in summary:
            out.append(
                f"| {method} | {summary['counterfactual_direction']:.3f} | {summary['counterfactual_exact']:.3f} |"
            )
    return "\n".join(out) + "\n"


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{result['domain']}[/]: {result['episodes']} held-out episodes, context {result['context']} "
                  f"states (pixel model: {result['pixel_context']} screens), sticky {result['sticky']}; weights "
                  f"{result['weights']}, pixel {result['pixel']}")  # fmt: skip
    hs = [h for h in (1, 2, 4, 8, 16) if h <= result["horizon"]]
    for key, title in MEASURES:
        table = Table(title=title)
        table.add_column("method")
        for h in hs:
            table.add_column(f"h={h}", justify="right")
        table.add_column("mean", justify="right")
        for method, values in _rows(result, key):
            table.add_row(
                method,
                *(f"{values[h - 1]:.3f}" for h in hs),
                f"{result['summary'][method][key + '_mean']:.3f}",
            )
        console.print(table)
    table = Table(
        title=f"held actions: the {result['controlled_noun']} moves as in the emulator (direction) / exact state"
    )
    for column in ("method", "direction", "exact"):
        table.add_column(column)
    for method, summary in result["summary"].items():
        if "counterfactual_direction" in summary:
            table.add_row(
                method, f"{summary['counterfactual_direction']:.3f}", f"{summary['counterfactual_exact']:.3f}"
            )
    console.print(table)

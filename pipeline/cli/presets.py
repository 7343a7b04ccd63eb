"""`semworld presets [--json]`: every named model preset with its parameter counts (meta device, no memory)."""

from __future__ import annotations

import argparse
import json

from models.presets import PRESETS, parameter_counts
from pipeline.cli.flags import add_command


def _rows() -> list[dict]:
    rows = []
    for name, preset in PRESETS.items():
        rows.append(
            {
                **preset.shape(),
                "name": name,
                "summary": preset.summary,
                "params": parameter_counts(name),
                "paper_params_m": dict(preset.paper_params_m),
            }
        )
    return rows


def _millions(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f}M"


def run(args: argparse.Namespace) -> int:
    """List the named model presets and their parameter counts."""
    rows = _rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = (
        f"{'name':<12} {'|V|':>6} {'d_x':>4} {'d_t':>4} {'H':>2} {'L':>2} {'N':>3} {'T':>2} "
        f"{'4-tensor':>9} {'baseline':>9}  paper (4-tensor / baseline)"
    )
    print(header)
    for r in rows:
        paper = r["paper_params_m"]
        paper_txt = f"{paper['four_tensor']:.1f}M / {paper['baseline']:.1f}M" if paper else "-"
        print(
            f"{r['name']:<12} {r['vocab_size']:>6} {r['d_x']:>4} {r['d_t']:>4} {r['n_heads']:>2} "
            f"{r['n_layers']:>2} {r['N']:>3} {r['T']:>2} {_millions(r['params']['four_tensor']):>9} "
            f"{_millions(r['params']['baseline']):>9}  {paper_txt}"
        )
    print(
        "CPU presets count at a nominal |V|; training sets |V| from the tokenizer. '-': model not available."
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `semworld presets` to the CLI."""
    p = add_command(sub, "presets", run)
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")

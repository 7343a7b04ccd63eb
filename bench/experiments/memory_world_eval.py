"""Exact match by horizon on the world's test split for predictors with and without tensor memory.

Scores each predictor folder with pipeline.evaluation.world.score_predictor (the function behind
`semworld eval world`): rollouts from every true history of 200 test clips (20 states; --length), horizons 1..8,
on the targets the history determines (and on every flagged step), by family and scenario; raw argmax states
unless --project. A folder whose model has a memory is scored a second time with its memory read dropped
(the ablation). Prints markdown tables and writes the raw results as JSON.

    python -m bench.experiments.memory_world_eval --predictor no_memory=weights/predictor \\
        --predictor memory=runs/memory/ft_memory --out runs/memory/world_eval.json
    python -m bench.experiments.memory_world_eval --predictor shipped=weights/predictor --seed 1 --copy-last  # fresh seed
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import torch

import world
from pipeline.evaluation.world import (
    DEFAULT_MIN_HISTORY,
    CopyLast,
    clips_from_records,
    score_predictor,
)
from pipeline.predictor import Predictor


def table(results: dict[str, dict[str, Any]], pick: str, name: str, horizon: int) -> str:
    rows = [
        f"| {pick} {name} | " + " | ".join(f"h={h}" for h in range(1, horizon + 1)) + " |",
        "|---|" + "---|" * horizon,
    ]
    for label, res in results.items():
        rates = res[pick] if pick.startswith("by_horizon") else res[pick][name]
        cells = [
            ("-" if rates[str(h)] is None else f"{100 * rates[str(h)]:.1f}") for h in range(1, horizon + 1)
        ]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--predictor", action="append", required=True, help="LABEL=FOLDER (repeatable)")
    p.add_argument("--clips", type=int, default=200)
    p.add_argument("--scenario", default="all", help="world scenarios or families (default: all)")
    p.add_argument("--seed", type=int, default=0, help="test-split seed (0: the documented test set)")
    p.add_argument("--copy-last", action="store_true", help="also score the copy-last-state reference")
    p.add_argument(
        "--no-ablation",
        action="store_true",
        help="skip the second scoring of a memory model with its read zeroed (halves the time)",
    )
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--length", type=int, default=20, help="states per test clip (default %(default)s)")
    p.add_argument(
        "--project",
        action="store_true",
        help="project predicted states onto the world grammar, as `semworld eval world` does",
    )
    p.add_argument(
        "--min-history",
        type=int,
        default=DEFAULT_MIN_HISTORY,
        help="roll out from every true history of at least this many states, for every predictor "
        "(default 4: models of every window T are scored on the same starts)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="runs/memory/world_eval.json")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(ns.threads)
    records = world.sequences(ns.scenario, ns.clips, seed=ns.seed, length=ns.length, split="test")
    clips = clips_from_records(records)
    results: dict[str, dict[str, Any]] = {}
    for spec in ns.predictor:
        label, folder = spec.split("=", 1)
        predictor = Predictor.from_pretrained(folder, device="cpu", domain="shapes", project=ns.project)
        results[label] = score_predictor(predictor, clips, ns.horizon, ns.min_history)
        logging.info(
            "%s: h=1 %.3f (%.0f s)", label, results[label]["by_horizon"]["1"], results[label]["seconds"]
        )
        if predictor.has_memory and not ns.no_ablation:
            predictor.model.memory_read_off = True
            results[f"{label}, memory read zeroed"] = score_predictor(
                predictor, clips, ns.horizon, ns.min_history
            )
    if ns.copy_last:
        results["copy last state"] = score_predictor(CopyLast(), clips, ns.horizon, ns.min_history)
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(json.dumps(results, indent=2) + "\n")
    first = next(iter(results.values()))
    print(table(results, "by_horizon", "(the targets the history determines)", ns.horizon) + "\n")
    print(table(results, "by_horizon_flagged", "(also those after a random event)", ns.horizon) + "\n")
    for fam in first["by_family"]:
        print(table(results, "by_family", fam, ns.horizon) + "\n")
    for sc in first["by_scenario"]:
        print(table(results, "by_scenario", sc, ns.horizon) + "\n")
    print("valid h1: " + ", ".join(f"{k} {100 * v['valid_h1']:.1f}" for k, v in results.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

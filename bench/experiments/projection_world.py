"""Exact match by horizon and family, and validity, of a world predictor with and without the projection onto
valid states (pipeline/projection.py), side by side in one process on the same test clips; docs/predictor_world.md.

    OMP_NUM_THREADS=1 python -m bench.experiments.projection_world --seeds 0 1 2 --out runs/projection_world.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.record import add_record_flags, write_record
from pipeline.evaluation.world import (
    DEFAULT_MIN_HISTORY,
    CopyLast,
    clips_from_records,
    score_predictor,
)
from pipeline.predictor import Predictor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--weights", type=Path, default=Path(__file__).resolve().parents[2] / "weights" / "predictor"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--length", type=int, default=20)
    ap.add_argument("--horizon", type=int, default=8)
    ap.add_argument(
        "--min-history",
        type=int,
        default=DEFAULT_MIN_HISTORY,
        help="roll out from every true history of at least this many states (as eval world does)",
    )
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--beam", type=int, default=16)
    add_record_flags(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import world
    from pipeline.domain import get_domain
    from pipeline.projection import projection_for

    raw = Predictor.from_pretrained(args.weights, device="cpu")  # free text: the model's argmax states
    tok = raw.tokenizer
    projected = Predictor(
        raw.model,
        tok,
        "cpu",
        projection=projection_for(
            get_domain("shapes"), tok, raw.N, tok.end_ids, top_k=args.top_k, beam=args.beam
        ),
    )
    results = []
    for seed in args.seeds:
        records = world.sequences("all", args.clips, seed=seed, length=args.length, split="test")
        clips = clips_from_records(records)
        row: dict = {"seed": seed, "clips": len(clips)}
        for name, predictor in (("raw", raw), ("projected", projected), ("copy_last", CopyLast())):
            t = time.perf_counter()
            if name == "projected":
                projected.projection.stats.states = projected.projection.stats.projected = 0
            row[name] = score_predictor(predictor, clips, horizon=args.horizon, min_history=args.min_history)
            row[name]["seconds"] = round(time.perf_counter() - t, 1)
            if name == "projected":
                s = projected.projection.stats
                row[name]["projected_share"] = round(s.projected / max(1, s.states), 5)
                row[name]["projected_states"] = s.projected
        results.append(row)
        brief = {
            n: (
                row[n]["by_horizon"]["1"],
                row[n]["by_horizon"][str(args.horizon)],
                row[n]["valid_h1"],
                row[n]["seconds"],
            )
            for n in ("raw", "projected", "copy_last")
        }
        print(json.dumps({"seed": seed, **brief}), flush=True)
    if args.out is not None:
        write_record(args.out, args, results=results)


if __name__ == "__main__":
    main()

"""What a benchmark leaves behind: its numbers as one JSON file, beside the arguments that produced them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_record_flags(parser: argparse.ArgumentParser, threads: int = 1) -> None:
    """The flags every scoring benchmark shares: --threads (torch threads) and --out (write the numbers there as
    one JSON file, `write_record`)."""
    parser.add_argument("--threads", type=int, default=threads, help="torch threads (default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as one JSON file here")


def episode_bench_args(doc: str, weights: str, episodes: int, seed: int) -> argparse.Namespace:
    """The command line of a benchmark over a game's held-out test episodes: --weights, --episodes, --seed (the
    test episodes' seed) and the record flags, parsed, with torch set to --threads."""
    import torch

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default=weights)
    ap.add_argument("--episodes", type=int, default=episodes)
    ap.add_argument("--seed", type=int, default=seed, help="test episode seed (default %(default)s)")
    add_record_flags(ap, threads=1)
    ns = ap.parse_args()
    torch.set_num_threads(ns.threads)
    return ns


def write_record(path: Path, args: argparse.Namespace, **numbers: Any) -> None:
    """{"args": every argument as a string, **numbers} as JSON at `path` (its folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **numbers}, indent=1))

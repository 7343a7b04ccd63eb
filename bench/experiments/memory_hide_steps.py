"""Where a predictor fails on `hide`: its predictable steps split by what happens at them (docs/history.md reports what it found).

In `hide` an object peeks out from behind the screen at intervals and hides again. A step is *appears* when the
target has more objects than the state before it (the hidden object comes back: which object, in which row, on
which side, is only in the history before the window), *disappears* when it has fewer, *same count* otherwise.
Exact match per kind, h = 1 from the true history, on `world.sequences("hide", CLIPS, seed, length=20,
split="test")`.

    python -m bench.experiments.memory_hide_steps --predictor shipped=weights/predictor --predictor other=runs/some/predictor
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

import world
from bench.record import add_record_flags
from pipeline.predictor import Predictor
from pipeline.utils import canonical_state


def step_kind(before: str, target: str) -> str:
    """appears / disappears / same count, from the number of objects (comma-separated items) of two states."""
    a, b = before.count(","), target.count(",")
    return "appears" if b > a else "disappears" if b < a else "same count"


def hide_step_rates(predictor: Predictor, records: list[dict], T: int = 4) -> dict[str, dict[str, float]]:
    """{kind: {"steps": n, "exact": rate}} over the predictable steps i >= T of the records, h = 1."""
    steps, hits = Counter(), Counter()
    for rec in records:
        states, predictable = rec["states"], rec["predictable"]
        idx = [i for i in range(T, len(states)) if predictable[i]]
        for i in idx:
            pred = predictor.predict([states[:i]], 1)[0][0]
            kind = step_kind(states[i - 1], states[i])
            steps[kind] += 1
            hits[kind] += canonical_state(pred) == canonical_state(states[i])
    return {k: {"steps": steps[k], "exact": hits[k] / steps[k]} for k in sorted(steps)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--predictor", action="append", required=True, help="LABEL=FOLDER (repeatable)")
    p.add_argument("--clips", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    add_record_flags(p)
    ns = p.parse_args(argv)
    torch.set_num_threads(ns.threads)
    records = world.sequences("hide", ns.clips, seed=ns.seed, length=20, split="test")
    results = {}
    for spec in ns.predictor:
        label, folder = spec.split("=", 1)
        results[label] = hide_step_rates(Predictor.from_pretrained(folder, device="cpu"), records)
        row = ", ".join(f"{k} {100 * v['exact']:.1f}% of {v['steps']}" for k, v in results[label].items())
        print(f"{label}: {row}")
    if ns.out:
        Path(ns.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

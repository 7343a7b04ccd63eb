"""What a predictor's rollout costs, side by side in one process: the shipped predictor against other weights
and against itself with mirror averaging (pipeline/symmetry.py), on the same world histories.

Every predictor loads with the projection on (what `semworld eval world` and the pipeline run). The runs are
interleaved (a, b, c, a, b, c, ...) because this machine's speed swings; medians of wall and CPU time are reported,
each with its ratio to the first predictor. What each gains is measured by `semworld eval world`
(docs/predictor_world.md).

    .venv/bin/python -m bench.rollout_cost --threads 2 "2 layers=runs/two-layer-w" "shipped=weights" "shipped mirror=weights:mirror"

A predictor is LABEL=WEIGHTS (a folder with model_index.json), with ":mirror" for mirror averaging.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import world
from pipeline.domain import domain_of_index
from pipeline.predictor import Predictor
from pipeline.utils import read_model_index


def load(spec: str) -> tuple[str, Predictor]:
    """Parse "LABEL=WEIGHTS[:mirror]" into (label, the folder's predictor with its domain's projection)."""
    label, _, rest = spec.partition("=")
    folder, _, flag = rest.partition(":")
    if not label or not folder or flag not in ("", "mirror"):
        raise SystemExit(f"bad predictor {spec!r}: expected LABEL=WEIGHTS or LABEL=WEIGHTS:mirror")
    domain = domain_of_index(read_model_index(folder))
    return label, Predictor.from_pretrained(
        Path(folder) / "predictor", device="cpu", domain=domain, mirror=flag == "mirror"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "predictors",
        nargs="*",
        default=["plain=weights", "mirror=weights:mirror"],
        help="LABEL=WEIGHTS[:mirror] ...; ratios are to the first (default: the shipped predictor "
        "with and without mirror averaging)",
    )
    p.add_argument("--histories", type=int, default=256, help="histories rolled out together (one batch)")
    p.add_argument("--history", type=int, default=8, help="true states per history")
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=7, help="test-split seed of the histories")
    p.add_argument("--json", type=Path, default=Path("runs/bench/rollout_cost.json"))
    ns = p.parse_args(argv)
    torch.set_num_threads(ns.threads)
    models = dict(load(s) for s in ns.predictors)
    clips = world.sequences("all", ns.histories, seed=ns.seed, length=ns.history, split="test")
    histories = [c["states"] for c in clips]
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in models}
    for model in models.values():  # warm-up
        model.predict(histories[:8], 2)
    for _ in range(ns.repeats):
        for label, model in models.items():
            wall, cpu = time.perf_counter(), time.process_time()
            model.predict(histories, ns.horizon)
            times[label].append((time.perf_counter() - wall, time.process_time() - cpu))
    med = {
        k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()
    }
    first = med[next(iter(med))]
    rows = {
        label: {
            "parameters": sum(p.numel() for p in models[label].model.parameters()),
            "wall_s": round(w, 3),
            "cpu_s": round(c, 3),
            "wall_ratio": round(w / first[0], 2),
            "cpu_ratio": round(c / first[1], 2),
            "ms_per_state": round(1000 * w / (ns.histories * ns.horizon), 3),
        }
        for label, (w, c) in med.items()
    }
    result = {
        "predictors": ns.predictors,
        "histories": ns.histories,
        "history": ns.history,
        "horizon": ns.horizon,
        "threads": ns.threads,
        "repeats": ns.repeats,
        "results": rows,
    }
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

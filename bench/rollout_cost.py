"""What mirror averaging costs: the shipped predictor's rollout with and without `mirror=True`, side by side in one
process, on the same world histories (pipeline/symmetry.py).

Both predictors load the same weights with the projection on (what `semworld eval world` and the pipeline run).
The runs are interleaved (plain, mirror, plain, ...) because this machine's speed swings; medians of wall and CPU
time are reported with their ratio. What the mirror gains is measured by `semworld eval world --mirror`
(docs/predictor_world.md).

    .venv/bin/python bench/mirror_cost.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import world  # noqa: E402
from pipeline.predictor import Predictor  # noqa: E402
from pipeline.utils import read_model_index  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", type=Path, default=Path("weights"), help="a folder with model_index.json")
    p.add_argument("--histories", type=int, default=256, help="histories rolled out together (one batch)")
    p.add_argument("--history", type=int, default=8, help="true states per history")
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5, help="interleaved plain/mirror pairs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=7, help="test-split seed of the histories")
    p.add_argument("--json", type=Path, default=Path("runs/bench/mirror_cost.json"))
    ns = p.parse_args(argv)
    torch.set_num_threads(ns.threads)
    grammar = read_model_index(ns.weights).get("grammar")
    folder = ns.weights / "predictor"
    models = {m: Predictor.from_pretrained(folder, device="cpu", grammar=grammar, mirror=m) for m in (False, True)}
    clips = world.sequences("all", ns.histories, seed=ns.seed, length=ns.history, split="test")
    histories = [c["states"] for c in clips]
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for m in (False, True):  # warm-up
        models[m].predict(histories[:8], 2)
    for _ in range(ns.repeats):
        for m in (False, True):
            wall, cpu = time.perf_counter(), time.process_time()
            models[m].predict(histories, ns.horizon)
            times[m].append((time.perf_counter() - wall, time.process_time() - cpu))
    med = {m: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for m, v in times.items()}
    result = {
        "weights": str(ns.weights), "histories": ns.histories, "history": ns.history, "horizon": ns.horizon,
        "threads": ns.threads, "repeats": ns.repeats,
        "plain_wall_s": round(med[False][0], 3), "mirror_wall_s": round(med[True][0], 3),
        "plain_cpu_s": round(med[False][1], 3), "mirror_cpu_s": round(med[True][1], 3),
        "wall_ratio": round(med[True][0] / med[False][0], 2), "cpu_ratio": round(med[True][1] / med[False][1], 2),
        "ms_per_state_plain": round(1000 * med[False][0] / (ns.histories * ns.horizon), 3),
        "ms_per_state_mirror": round(1000 * med[True][0] / (ns.histories * ns.horizon), 3),
    }
    ns.json.parent.mkdir(parents=True, exist_ok=True)
    ns.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Planning time per step on CPU: how it grows with the number of candidate sequences and the horizon, and what the
shared-prefix rollout saves against rolling every candidate out on its own (`Predictor.predict_under` on C
histories), side by side in one process on the same candidates.

    .venv/bin/python -m bench.plan_speed --weights weights/pong                      # the table
    .venv/bin/python -m bench.plan_speed --candidates 9,27,64 --horizons 4,6,8 --threads 2 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    import torch

    from pipeline.cli.eval_actions import load_predictor_with_domain
    from pipeline.domains.atari.record import clip_seed, record_clip
    from pipeline.planning import PlanConfig, Planner

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default="weights/pong")
    ap.add_argument("--goal", default="return the ball")
    ap.add_argument("--candidates", default="9,27,64,128")
    ap.add_argument("--horizons", default="4,6,8,12")
    ap.add_argument(
        "--repeats", type=int, default=5, help="plan steps timed per cell (the median is reported)"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    predictor, domain = load_predictor_with_domain(args.weights, None)
    clip = record_clip(domain.name, clip_seed("test", 0, 0), predictor.T, frames=False)
    history, past = clip.states, clip.actions[:-1]
    rows = []
    for h in (int(x) for x in args.horizons.split(",")):
        for c in (int(x) for x in args.candidates.split(",")):
            planner = Planner(predictor, domain, args.goal, PlanConfig(horizon=h, candidates=c))
            planner.step(history, past)  # warm-up
            step = statistics.median(planner.step(history, past).seconds for _ in range(args.repeats))
            uniform = np.full((h, len(planner.actions)), 1 / len(planner.actions))
            seqs = np.concatenate([planner.structured(), planner.draw(uniform, c)])[:c]
            acts = [[*past, *(planner.actions[a] for a in s)] for s in seqs]
            shared = median_seconds(lambda p=planner, q=seqs: p.rollout(history, past, q), args.repeats)
            plain = median_seconds(
                lambda q=seqs, k=h, a=acts: predictor.predict_under([history] * len(q), k, a), args.repeats
            )
            rows.append({"horizon": h, "candidates": c, "plan_step_ms": 1000 * step, "shared_rollout_ms": 1000 * shared,
                         "plain_rollout_ms": 1000 * plain, "speedup": plain / shared})  # fmt: skip
            print(f"H={h:2d} C={c:4d}: plan step {1000 * step:7.1f} ms | rollout with shared prefixes "
                  f"{1000 * shared:7.1f} ms, every candidate whole {1000 * plain:7.1f} ms ({plain / shared:.2f}x)",
                  flush=True)  # fmt: skip
    if args.json:
        print(json.dumps({"weights": args.weights, "threads": args.threads, "rows": rows}))


if __name__ == "__main__":
    main()

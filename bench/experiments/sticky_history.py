"""Planning under sticky actions: does the planner do better when the actions of its history are read as unknown?

Under sticky actions (probability p each frame, the console repeats its last input) the action logged after a
state is not always the one the console ran, so a predictor that reads the logged actions is told something
false about the recent past. This plays the same games (`pipeline.evaluation.plan`) with the planner given its
history's actions as chosen ("logged") and as unknown ("unknown": the predictor saw 10% of its training windows'
action slots blanked), beside the scripted tracker reading RAM (docs/planning.md).

    python -m bench.experiments.sticky_history --games 8 --max-steps 1000 --sticky 0.25 --threads 2 --out runs/bench/sticky.json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import torch

from bench.record import add_record_flags, write_record
from pipeline.cli.eval_actions import load_predictor_with_domain
from pipeline.evaluation.plan import (
    Controller,
    evaluate_plan,
    make_planner,
    planner_controller,
    scripted_controller,
)
from pipeline.planning import PlanConfig


def hide_past(inner: Controller) -> Controller:
    """The same controller, told every past action is unknown (None)."""
    return lambda states, actions, ram: inner(states, [None] * len(actions), ram)  # type: ignore[list-item]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default="weights/pong")
    ap.add_argument("--goal", default="return the ball")
    ap.add_argument("--games", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=1000)
    ap.add_argument("--sticky", type=float, default=0.25)
    ap.add_argument("--game-seed", type=int, default=0)
    add_record_flags(ap, threads=2)
    ns = ap.parse_args()
    torch.set_num_threads(ns.threads)
    predictor, domain = load_predictor_with_domain(ns.weights, None)
    # the planner as `eval plan` runs it (its plan time reported), and a second one that hides the past actions
    controllers: dict[str, Any] = {
        "planner, past actions logged": make_planner(predictor, domain, ns.goal, PlanConfig())
    }
    planner, window = make_planner(predictor, domain, ns.goal, PlanConfig())
    planner.reseed()  # the same draws as the first (evaluate_plan reseeds the planners it is given as specs)
    controllers["planner, past actions unknown"] = hide_past(planner_controller(planner, window, []))
    controllers["tracker (RAM)"] = scripted_controller("tracker", domain, np.random.default_rng(ns.game_seed))
    result = evaluate_plan(domain, ns.goal, controllers, ns.games, ns.game_seed, ns.sticky, ns.max_steps)
    rows = {}
    for name, entry in result["controllers"].items():
        t = entry["total"]
        rows[name] = {k: t.get(k) for k in ("balls_reached", "balls_returned", "return_rate", "points_won",
                                            "points_lost")}  # fmt: skip
        print(f"{name:34s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                          for k, v in rows[name].items()))  # fmt: skip
    if ns.out:
        write_record(ns.out, ns, rows=rows, result=result)
    else:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()

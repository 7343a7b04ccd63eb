"""Turning round in Freeway: is the chicken's next place right under "up" after it was walked back down?

Each held-out test episode (`AtariDomain.simulator`, the mixed behaviour policy) is played 20 steps by its
policy; then, in the "walked down" case, 12 steps of "down"; then the predictor forecasts 8 steps of "up" from the
last 8 states and their actions, and the emulator plays the same 8 steps. The "control" case is the same episode
without the walk down. Reported: the share of episodes whose forecast chicken is where the emulator has it, by
horizon. The mixed policy's crossing player only walks up, so the walk down and the turn are rare in its data
(docs/atari.md, "What the shipped predictors score").

    python -m bench.experiments.freeway_turnaround --episodes 48 --out runs/bench/turnaround.json
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from bench.record import episode_bench_args, write_record
from pipeline.cli.eval_actions import load_predictor_with_domain

T, HORIZON, PLAYED, WALKED = 8, 8, 20, 12


def chicken(domain: Any, state: str) -> int | None:
    """The chicken's number in a Freeway state, by the domain's own parse (None if the state does not parse)."""
    return (domain.parse(state) or {}).get("chicken")


def turnaround(predictor: Any, domain: Any, episodes: int, seed: int) -> dict[str, list[float]]:
    """The share of `episodes` test episodes (of `seed`) whose forecast chicken is right, by horizon, after the
    walk down ("walked down") and without it ("control")."""
    right: dict[str, list[list[bool]]] = {"walked down": [], "control": []}
    for i in range(episodes):
        for case, rows in right.items():
            emu, policy = domain.simulator(i, seed=seed)
            states, actions = [emu.state()], []
            for step in range(PLAYED + (WALKED if case == "walked down" else 0)):
                actions.append(policy(emu.ram()) if step < PLAYED else "down")
                emu.step(actions[-1])
                states.append(emu.state())
            truth = []
            for _ in range(HORIZON):
                emu.step("up")
                truth.append(emu.state())
            # actions[i] follows history state i: the 7 logged ones inside the window, then "up" at every step
            given = actions[-(T - 1) :] + ["up"] * HORIZON
            forecast = predictor.predict_under([states[-T:]], HORIZON, [given])[0][0]
            rows.append([chicken(domain, f) == chicken(domain, t) for f, t in zip(forecast, truth)])
    return {case: np.mean(rows, axis=0).round(3).tolist() for case, rows in right.items()}


def main() -> None:
    ns = episode_bench_args(__doc__, "weights/freeway", episodes=48, seed=7)
    predictor, domain = load_predictor_with_domain(ns.weights, None)
    shares = turnaround(predictor, domain, ns.episodes, ns.seed)
    for case, by_h in shares.items():
        print(f"{case:12s} chicken right by horizon 1..{HORIZON}: " + " ".join(f"{v:.2f}" for v in by_h))
    if ns.out:
        write_record(ns.out, ns, shares=shares)
    else:
        print(json.dumps(shares))


if __name__ == "__main__":
    main()

"""Pong's paddle knob: are the predictor's misses of the player's paddle hidden state the history cannot show?

The Arcade Learning Environment plays Pong with a paddle controller: an action turns a knob (ALE's paddle
resistance) and the game moves the paddle towards where the knob points, with a lag. The knob is not in the 128
bytes of RAM, so `semworld eval actions`, which moves RAM positions within their bins, cannot test it. Here each
test episode's history is replayed with the knob turned a little further or less far during the history's first
step (the same action at another strength: `ALEInterface.act(action, paddle_strength)`, strength 1 being
ALE's whole step of 4 x 23,000 units); of those consoles, the ones whose every history state reads the same are
played on under the logged actions. A target where one of them reaches another state is one the history leaves
open through the knob. Reported at h = 1: the targets `eval actions` counts as determined that the predictor
misses, field by field, and how many of those the knob leaves open; and the share of all targets it leaves open.

    python -m bench.experiments.pong_knob --episodes 200 --out runs/bench/pong_knob.json
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import ale_py

from bench.record import episode_bench_args, write_record
from pipeline.cli.eval_actions import load_predictor_with_domain
from pipeline.evaluation.actions import Episode, came_into_play, play_on_if_alike, record_episodes

T, HORIZON = 8, 1
STEP = 4 * 23_000  # ALE's knob travel in one agent step of 4 frames at full strength
OFFSETS = (250, 500, 1000, 2000, 3000)  # knob units, each way: up to 0.8 RAM units of the paddle's rest


def knob_open(domain: Any, index: int, seed: int, ep: Episode) -> list[bool]:
    """Per step of the logged future: whether a console whose knob moved by one of OFFSETS (either way) during
    the history's first step, and which reads as the history did, went on to another state there."""
    direction = {"up": -1.0, "down": 1.0, "stay": 0.0}  # the knob's travel per full-strength step, in STEPs
    codes = {word: getattr(ale_py.Action, name) for word, name in domain.game.ale_actions.items()}
    differs = [False] * len(ep.futures["logged"][1])
    emu, _ = domain.simulator(index, seed=seed)
    first = emu.clone()  # the history's first state
    for offset in (sign * d for d in OFFSETS for sign in (1, -1)):
        travel = direction[ep.actions[0]] + offset / STEP
        if abs(travel) > 1:
            continue  # more than a full-strength step
        emu.restore(first)
        emu.ale.act(codes["up" if travel < 0 else "down"], abs(travel))  # to history state 1, knob turned
        play_on_if_alike(emu, ep, 1, differs)
    return differs


def knob_probe(predictor: Any, domain: Any, episodes: int, seed: int, variants: int = 256) -> dict[str, Any]:
    """The counts above over `episodes` test episodes of `seed` (`variants`: the RAM test's, as eval actions')."""
    eps = record_episodes(domain, episodes, T, HORIZON, seed=seed, variants=variants)
    given = [ep.actions + ep.futures["logged"][0][:1] for ep in eps]
    forecast = predictor.predict_under([ep.history for ep in eps], HORIZON, given)[0]
    misses: Counter[str] = Counter()
    open_misses: Counter[str] = Counter()
    determined = knob_opened = 0
    for i, (ep, pred) in enumerate(zip(eps, forecast, strict=True)):
        served = came_into_play(ep.history[-1], ep.futures["logged"][1][0])
        opened = knob_open(domain, i, seed, ep)[0]
        knob_opened += opened
        if served or (ep.hidden and ep.hidden[0]):
            continue
        determined += 1
        truth, guess = domain.parse(ep.futures["logged"][1][0]), domain.parse(pred[0])
        for name in (k for k in truth if truth[k] != guess.get(k)):
            misses[name] += 1
            open_misses[name] += opened
    return {
        "episodes": episodes,
        "determined_targets": determined,
        "missed_by_field": dict(misses),
        "of_them_left_open_by_the_knob": dict(open_misses),
        "share_left_open_by_the_knob": round(knob_opened / episodes, 4),
    }


def main() -> None:
    ns = episode_bench_args(__doc__, "weights/pong", episodes=200, seed=0)
    predictor, domain = load_predictor_with_domain(ns.weights, None)
    result = knob_probe(predictor, domain, ns.episodes, ns.seed)
    print(json.dumps(result))
    if ns.out:
        write_record(ns.out, ns, **result)


if __name__ == "__main__":
    main()

"""Atari speeds: emulator steps recorded per second (ALE at frame skip 4, reading the RAM into a state each step,
with and without the screen for the clip), and a game predictor's states per second under actions (a batch of
histories rolled out under given actions), in one process.

    .venv/bin/python -m bench.atari_speed --weights weights/pong            # and --game freeway --weights ...
    .venv/bin/python -m bench.atari_speed --steps 20000 --batch 1,64,256 --json
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def emulator_steps_per_s(game: str, steps: int, screens: bool) -> float:
    """Agent steps (4 frames each) per second, each one's state read from RAM and spelled (and its screen)."""
    from pipeline.domains.atari.games import GAMES
    from pipeline.domains.atari.record import Emulator

    emu = Emulator(GAMES[game], seed=0)
    actions = ("stay", "up", "down")
    t = time.perf_counter()
    for i in range(steps):
        emu.state()
        if screens:
            emu.screen()
        emu.step(actions[i % 3])
        if emu.over():
            emu.ale.reset_game()
    return steps / (time.perf_counter() - t)


def predictor_states_per_s(weights: str, game: str, batch: int, horizon: int, repeats: int) -> float:
    """Predicted states per second: `batch` histories of T recorded states, `horizon` steps under actions."""
    from pipeline.cli.eval_actions import load_predictor_with_domain
    from pipeline.domains.atari.record import clip_seed, record_clip

    predictor, _ = load_predictor_with_domain(weights, game)
    clips = [
        record_clip(game, clip_seed("test", 0, i), predictor.T, frames=False) for i in range(min(batch, 16))
    ]
    histories = [clips[i % len(clips)].states for i in range(batch)]
    actions = [[*clips[i % len(clips)].actions[:-1], *["up"] * horizon] for i in range(batch)]
    predictor.predict_under(histories, horizon, actions)  # warm-up
    t = time.perf_counter()
    for _ in range(repeats):
        predictor.predict_under(histories, horizon, actions)
    return batch * horizon * repeats / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="pong")
    ap.add_argument("--weights", default=None, help="a game's weights folder (default: weights/<game>)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--batch", default="1,64,256")
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = {
        "game": args.game,
        "threads": args.threads,
        "emulator_steps_per_s": round(emulator_steps_per_s(args.game, args.steps, screens=False)),
        "emulator_steps_per_s_with_screens": round(emulator_steps_per_s(args.game, args.steps, screens=True)),
        "predictor_states_per_s": {},
    }
    weights = args.weights or f"weights/{args.game}"
    for b in (int(x) for x in args.batch.split(",")):
        out["predictor_states_per_s"][b] = round(
            predictor_states_per_s(weights, args.game, b, args.horizon, args.repeats), 1
        )
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.game}: emulator {out['emulator_steps_per_s']} steps/s (states from RAM), "
          f"{out['emulator_steps_per_s_with_screens']} with screens; {args.threads} torch threads")  # fmt: skip
    for b, v in out["predictor_states_per_s"].items():
        print(f"  predictor, batch {b:4d}: {v} states/s under actions")


if __name__ == "__main__":
    main()

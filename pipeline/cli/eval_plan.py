"""`semworld eval plan`: the planner plays whole games in the domain's emulator; the scoring lives in
pipeline.evaluation.plan."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.cli.eval_actions import add_game_weights_flags, load_predictor_with_domain
from pipeline.cli.flags import add_command, add_result_flags, add_sticky_flag, emit_result
from pipeline.cli.plan import add_search_flags, search_config
from pipeline.utils import UserError

SCRIPTED = ("tracker", "random", "up")
VIDEO_STEPS = 450  # --video: the first 30 s of the planner's first game (15 states a second)


def add_plan_parser(eval_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `eval plan`."""
    p = add_command(eval_subparsers, "plan", run_eval_plan)
    add_game_weights_flags(p, baseline="another predictor folder to plan with, scored beside")
    p.add_argument("--goal", default=None, help="the planner's goal (default: the domain's first named goal)")
    p.add_argument("--frames", action="store_true",
                   help="also play the planner reading each screen through the captioner of --weights "
                        "(what a user's clip gives it), scored beside the one reading RAM")  # fmt: skip
    p.add_argument("--ram", action=argparse.BooleanOptionalAction, default=True,
                   help="play the planner reading RAM, the upper bound (default); --no-ram leaves it out, to play "
                        "only --frames or --baseline in the time a long game takes")  # fmt: skip
    p.add_argument("--references", nargs="*", default=["tracker", "random"], choices=SCRIPTED,
                   help="scripted players scored on the same games (default: tracker random)")  # fmt: skip
    p.add_argument("--games", type=int, default=4, help="games per controller (default %(default)s)")
    p.add_argument("--max-steps", type=int, default=2000, help="agent steps at most per game (default 2000: "
                   "about 2 minutes of play)")  # fmt: skip
    p.add_argument("--game-seed", type=int, default=0, help="the test games' seed (default %(default)s)")
    add_sticky_flag(p)
    p.add_argument(
        "--video",
        type=Path,
        default=None,
        help="write the first 30 s of the first planner's first game as MP4 here",
    )
    add_search_flags(p)
    add_result_flags(p)
    return p


def screen_reader(weights: str, domain: Any) -> Callable[[np.ndarray], str]:
    """The captioner of a weights folder as a reader of one screen at a time."""
    from pipeline.captioner import Captioner

    folder = Path(weights) / "captioner"
    if not (folder / "config.json").is_file():
        raise UserError(f"--frames: {weights} has no captioner/ to read the screens with")
    captioner = Captioner.from_pretrained(folder, device="cpu", domain=domain)
    return lambda screen: captioner.caption([screen])[0]


def run_eval_plan(ns: argparse.Namespace) -> int:
    """Play whole games in the domain's emulator with the planner (closed loop), beside scripted players.

    The planner plays held-out games in the emulator from their reset: each step it reads the true state (RAM,
    in words; with --frames a second planner reads each screen through the captioner; --no-ram plays only the
    others), plans towards --goal with the predictor and the emulator executes the first action. Beside it, the
    same games under --references (the game's scripted player reading RAM, random play, always 'up') and, with
    --baseline, the planner with another predictor. Pong reports points and the share of balls reaching the
    paddle that it returns; Freeway crossings and knock-backs."""
    from pipeline.evaluation.plan import (
        Controller,
        PlannerSpec,
        evaluate_plan,
        make_planner,
        markdown,
        scripted_controller,
    )
    from pipeline.goals import parse_goal
    from pipeline.placement import set_threads
    from pipeline.predictor import Predictor

    if ns.games < 1 or ns.max_steps < 1:
        raise UserError("--games and --max-steps must be >= 1")
    config = search_config(ns)
    set_threads(ns.threads)
    predictor, domain = load_predictor_with_domain(ns.weights, ns.domain)
    if not callable(getattr(domain, "new_game", None)):
        raise UserError(f"the {domain.name} domain has no emulator to play in")
    goal = ns.goal or next(iter(getattr(domain, "goals", {}) or {}), None)
    if goal is None:
        raise UserError(f"the {domain.name} domain names no goal; give --goal")
    parse_goal(goal, domain)
    if not (ns.ram or ns.frames or ns.baseline):
        raise UserError("--no-ram leaves no planner to play: give --frames or --baseline")
    controllers: dict[str, Controller | PlannerSpec] = {}
    if ns.ram:
        controllers["planner"] = make_planner(predictor, domain, goal, config)
    if ns.frames:
        planner, window = make_planner(predictor, domain, goal, config)
        controllers["planner-frames"] = (planner, window, screen_reader(ns.weights, domain))
    if ns.baseline:
        base = Predictor.from_pretrained(ns.baseline, domain=domain)
        controllers["baseline-planner"] = make_planner(base, domain, goal, config)
    for name in ns.references:
        controllers[name] = scripted_controller(name, domain, np.random.default_rng(ns.game_seed))
    frames: list = []
    filmed = next(iter(controllers))  # the first planner played
    result = evaluate_plan(domain, goal, controllers, ns.games, ns.game_seed, ns.sticky, ns.max_steps,
                           video=(filmed, frames) if ns.video else None)  # fmt: skip
    result["search"] = vars(config)
    if ns.video and frames:
        from pipeline.video import encode_mp4

        ns.video.parent.mkdir(parents=True, exist_ok=True)
        ns.video.write_bytes(encode_mp4(frames[:VIDEO_STEPS], 15.0, "threads=1:sliced-threads=0"))

    def report() -> None:
        print(
            f"{domain.name}: goal {goal!r}, {ns.games} games of at most {ns.max_steps} steps, sticky {ns.sticky}"
        )
        print(markdown(result), end="")

    return emit_result(ns, result, report)

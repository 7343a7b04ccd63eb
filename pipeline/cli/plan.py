"""`semworld plan`: a goal in words becomes actions, planned with the predictor (pipeline.planning)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pipeline.cli.flags import add_command
from pipeline.cli.predict import add_history_flags
from pipeline.utils import UserError, default_weights_dir
from pipeline.wordfiles import read_actions_file, read_states_file


def add_search_flags(p: argparse.ArgumentParser) -> None:
    """The planner's search (pipeline.planning.PlanConfig): the same flags in `plan` and `eval plan`."""
    p.add_argument(
        "--horizon", type=int, default=4, help="forecast steps per candidate sequence (default %(default)s)"
    )
    p.add_argument(
        "--candidates", type=int, default=27, help="candidate sequences per round (default %(default)s)"
    )
    p.add_argument("--method", default="shooting", choices=("shooting", "cem"),
                   help="random shooting (one round) or the cross-entropy method (default %(default)s)")  # fmt: skip
    p.add_argument("--iterations", type=int, default=2, help="rounds of the cross-entropy method (default 2)")
    p.add_argument("--seed", type=int, default=0, help="the search's random draws (default %(default)s)")


def search_config(ns: argparse.Namespace) -> Any:
    from pipeline.planning import PlanConfig

    try:
        return PlanConfig(ns.horizon, ns.candidates, ns.method, ns.iterations, seed=ns.seed)
    except ValueError as err:
        raise UserError(f"--{str(err).split()[0]}: {err}") from None


def register(sub: argparse._SubParsersAction) -> None:
    """Add `plan`."""
    p = add_command(sub, "plan", run_plan)
    add_history_flags(p)
    p.add_argument("--goal", required=True, help="the goal in words, e.g. 'return the ball'")
    p.add_argument("--steps", type=int, default=8, help="actions to plan (default %(default)s)")
    add_search_flags(p)
    p.add_argument("--weights", type=Path, default=None,
                   help="weights directory (default: $SEMWORLD_WEIGHTS_DIR, else the shipped weights/)")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="write plan.json (and the planned frames) here")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: one fewer than the cores)"
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of text")


def run_plan(ns: argparse.Namespace) -> int:
    """Plan actions towards a goal in words with a predictor that forecasts under actions.

    Read CLIP as states (or start from --states), then plan --steps actions towards --goal: at each step the
    planner rolls out candidate action sequences with the predictor, scores each forecast against the goal, takes
    the first action of the best and plans again from the state it leads to. Prints the plan and its states; with
    --out, writes plan.json and, when the weights have a renderer, the planned frames. A goal is a domain's named
    goal ('return the ball'), a condition on a field ('player < 20', 'player = ball y - 2'), a partial state with
    '*' for any word, or several joined by 'and' (docs/planning.md)."""
    from pipeline.goals import parse_goal
    from pipeline.loading import named_stages
    from pipeline.placement import set_threads
    from pipeline.world_model import WorldModelPipeline

    if (ns.clip is None) == (ns.states is None):
        raise UserError("give either a CLIP or --states FILE (not both)")
    if ns.clip is not None and not ns.clip.is_file():
        raise UserError(f"{ns.clip}: no such file")
    config = search_config(ns)
    states = read_states_file(ns.states) if ns.states is not None else None
    actions = read_actions_file(ns.actions) if ns.actions is not None else None
    weights = ns.weights or default_weights_dir()
    stages = named_stages(weights, {})
    if states is None and "captioner" not in stages:
        raise UserError(
            f"{weights}: these weights have no captioner to read a clip; start from --states FILE"
        )
    set_threads(ns.threads)
    pipe = WorldModelPipeline.from_pretrained(weights, stages=stages)
    parse_goal(ns.goal, pipe.domain)  # a goal that means nothing here: one line, before any search
    out = pipe.plan(
        ns.clip, states=states, actions=actions, goal=ns.goal, steps=ns.steps, config=config,
        render="renderer" in stages and ns.out is not None,
    )  # fmt: skip
    doc = out.document()
    if ns.out is not None:
        write_plan(out, doc, ns.out)
    if ns.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"goal: {out.goal}  ({out.domain})")
    print(f"from: {out.observed_states[-1]}")
    for k, (action, state, step) in enumerate(
        zip(out.actions, out.predicted_states, out.steps, strict=True), 1
    ):
        mark = "  goal holds in its forecast" if step.holds else ""
        print(f"{k:3d}  {action:<6s} -> {state}   cost {step.cost:.2f}{mark}")
    reached = f"after step {out.reached}" if out.reached else f"not within {len(out.actions)} steps"
    per_step = 1000 * out.timings.get("plan", 0.0) / max(len(out.steps), 1)
    print(f"goal reached in the forecast: {reached}; planning {per_step:.0f} ms a step "
          f"({out.steps[0].candidates} candidates, horizon {config.horizon})")  # fmt: skip
    if ns.out is not None:
        print(
            f"wrote {ns.out / 'plan.json'}"
            + (f" and {len(out.predicted_frames)} frames" if out.predicted_frames else "")
        )
    return 0


def write_plan(out: Any, doc: dict[str, Any], folder: Path) -> None:
    """plan.json, and planned_NNN.png + planned.mp4 when the plan was drawn."""
    from PIL import Image

    from pipeline.utils import atomic_write_text
    from pipeline.video import encode_mp4

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {folder}: cannot write there ({err.strerror or err})") from None
    atomic_write_text(folder / "plan.json", json.dumps(doc, indent=2) + "\n")
    for i, frame in enumerate(out.predicted_frames):
        Image.fromarray(frame).save(folder / f"planned_{i:03d}.png")
    if out.predicted_frames:
        (folder / "planned.mp4").write_bytes(encode_mp4(out.predicted_frames, out.state_rate or 8.0))

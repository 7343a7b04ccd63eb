"""Planning checked in the real game: the planner plays whole games in the domain's emulator, closed loop.

Each step the controller sees the game as a user would give it: the true states read from RAM (the upper bound),
or, for a planner given a reader, the states its captioner reads from the screen. It chooses an action, and the
emulator executes it (with sticky actions when asked: the console then repeats its last input with that
probability each frame). The game's tally (pipeline.domains.atari.tally) scores it. Controllers:

    planner            the planner with the weights' predictor
    planner-frames     the same planner reading each screen through the weights' captioner
    baseline-planner   the same planner with another predictor (the 1-D baseline)
    tracker            the game's scripted player reading RAM (Pong: follows the ball; the ceiling)
    random             a uniform action each step
    up                 always "up" (Freeway's simplest crossing policy)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pipeline.planning import PlanConfig, Planner

logger = logging.getLogger(__name__)

Controller = Callable[[list[str], list[str], np.ndarray], str]  # (states, actions so far, ram) -> action
Reader = Callable[[np.ndarray], str]  # a screen (210, 160, 3) uint8 -> its state in words (a captioner)
# A planner and the window of states it reads, and optionally the reader it sees the game through
PlannerSpec = tuple[Planner, int] | tuple[Planner, int, Reader]


def planner_controller(planner: Planner, window: int, timings: list[float]) -> Controller:
    """The planner over the last `window` states (and the actions between them); appends each step's seconds."""

    def act(states: list[str], actions: list[str], ram: np.ndarray) -> str:
        history = states[-window:]
        past = actions[len(states) - len(history) :]
        step = planner.step(history, past)
        timings.append(step.seconds)
        return step.action

    return act


def scripted_controller(kind: str, domain: Any, rng: np.random.Generator) -> Controller:
    actions = tuple(domain.actions)
    if kind == "tracker":
        return lambda states, acts, ram: domain.game.track(ram)
    if kind == "up":
        return lambda states, acts, ram: "up"
    return lambda states, acts, ram: actions[int(rng.integers(len(actions)))]


def play(
    domain: Any,
    controller: Controller,
    index: int,
    seed: int,
    sticky: float,
    max_steps: int,
    frames: list[np.ndarray] | None = None,
    reader: Reader | None = None,
) -> dict[str, Any]:
    """One game (from the console's reset, until it ends or `max_steps` agent steps) under `controller`; its tally,
    steps and the game score. `frames`: when given, collects the screen before every step. `reader`: the
    controller sees the states it reads from the screens (and the result counts the steps it misread)."""
    emu, tally = domain.new_game(index, seed, sticky)
    states: list[str] = []
    actions: list[str] = []
    score = 0.0
    steps = misread = 0
    while steps < max_steps and not emu.over():
        ram = emu.ram()
        truth = seen = emu.state()
        if frames is not None or reader is not None:
            screen = emu.screen()  # (210, 160, 3) uint8
            if frames is not None:
                frames.append(screen)
            if reader is not None:
                seen = reader(screen)
                misread += seen != truth
        states.append(seen)
        action = controller(states, actions, ram)
        actions.append(action)
        reward = emu.step(action)
        score += reward
        tally.update(emu.ram(), action, reward)
        steps += 1
    result = {**tally.summary(), "score": score, "steps": steps, "over": emu.over()}
    return {**result, "misread": misread} if reader is not None else result


def evaluate_plan(
    domain: Any,
    goal: str,
    controllers: dict[str, Controller | PlannerSpec],
    games: int,
    seed: int,
    sticky: float,
    max_steps: int,
    video: tuple[str, list[np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Every controller plays the same `games` games; per controller the summed tally, the per-game results and,
    for planners, the planning time per step (mean and 95th percentile, ms). `video` (name, list): the list
    collects the screens of that controller's first game."""
    out: dict[str, Any] = {"domain": domain.name, "goal": goal, "games": games, "seed": seed, "sticky": sticky,
                           "max_steps": max_steps, "controllers": {}}  # fmt: skip
    for name, ctl in controllers.items():
        timings: list[float] = []
        reader = None
        if isinstance(ctl, tuple):
            planner, window, *rest = ctl
            reader = rest[0] if rest else None
            planner.reseed()  # every controller's games start from the same draws
            ctl = planner_controller(planner, window, timings)
        start = time.perf_counter()
        results = []
        for g in range(games):
            frames = video[1] if video is not None and video[0] == name and g == 0 else None
            results.append(play(domain, ctl, g, seed, sticky, max_steps, frames, reader))
            logger.info("%s game %d/%d: %s", name, g + 1, games, _short(results[-1]))
        total = {k: sum(r[k] for r in results) for k in results[0]
                 if k != "return_rate" and isinstance(results[0][k], (int, float)) and not isinstance(results[0][k], bool)}  # fmt: skip
        if "balls_reached" in total:
            total["return_rate"] = (
                total["balls_returned"] / total["balls_reached"] if total["balls_reached"] else None
            )
        entry: dict[str, Any] = {"total": total, "per_game": results, "seconds": time.perf_counter() - start}
        if timings:
            ms = 1000 * np.asarray(timings)
            entry["plan_ms"] = {
                "mean": float(ms.mean()),
                "p95": float(np.percentile(ms, 95)),
                "steps": len(ms),
            }
        out["controllers"][name] = entry
    return out


def _short(result: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())


def markdown(result: dict[str, Any]) -> str:
    """The closed-loop table of one evaluation."""
    rows = result["controllers"]
    keys = list(
        dict.fromkeys(k for r in rows.values() for k in r["total"] if k != "steps")
    )  # misread: readers
    head = ["controller", *keys, "steps", "plan ms (mean / p95)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in rows.items():
        t = r["total"]
        cells = [f"{t[k]:.1%}" if k == "return_rate" and t.get(k) is not None else f"{t[k]:g}"
                 if t.get(k) is not None else "-" for k in keys]  # fmt: skip
        ms = r.get("plan_ms")
        lines.append("| " + " | ".join([name, *cells, str(t["steps"]),
                                        f"{ms['mean']:.0f} / {ms['p95']:.0f}" if ms else "-"]) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def make_planner(predictor: Any, domain: Any, goal: str, config: PlanConfig) -> tuple[Planner, int]:
    """A planner and the history window its predictor reads (T states)."""
    return Planner(predictor, domain, goal, config), int(getattr(predictor, "T", 8))

"""Named scenarios (one registry), families, seeding, and the fast in-memory data: `sequences`, `frames_and_states`.

Clip i of a run draws from `SeedSequence([seed, split, i])`, so records do not depend on how many are asked
for, on the number of worker processes, or on whether videos are written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from world.render import render_state
from world.sim import Episode, WorldConfig, simulate

FPS = 10  # video frames per second
STRIDE = 5  # frames per state: two states a second
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Scenario:
    """A named preset: its family ("physics", "memory" or "stochastic"), a one-line description, its knobs."""

    name: str
    family: str
    description: str
    config: WorldConfig


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "bounce", "physics", "1-3 objects at 1 cell/state, walls reflect", WorldConfig("bounce", 1, 3)
        ),
        Scenario(
            "fast", "physics", "1-3 objects at 1 or 2 cells/state", WorldConfig("bounce", 1, 3, max_speed=2)
        ),
        Scenario(
            "gravity",
            "physics",
            "balls bounce on the floor, other shapes fall and rest",
            WorldConfig("gravity", 1, 3),
        ),
        Scenario(
            "collide", "physics", "2-3 objects in one row collide elastically", WorldConfig("collide", 2, 3)
        ),
        Scenario(
            "occlude",
            "physics",
            "1-2 objects pass behind a screen (hidden one state)",
            WorldConfig("bounce", 1, 2, screen=True),
        ),
        Scenario(
            "blink",
            "memory",
            "a lamp on 5 states, off 5 (period 10 > T = 4); 0-2 objects bounce",
            WorldConfig("bounce", 0, 2, lamp=True),
        ),
        Scenario(
            "hide",
            "memory",
            "an object stays 6 states behind a screen, then walks on; 0-1 more objects bounce",
            WorldConfig("hide", 1, 2, screen=True, hide_states=6),
        ),
        Scenario(
            "appear",
            "stochastic",
            "0-2 objects bounce; a new one appears at a random state",
            WorldConfig("bounce", 0, 2, appear=True),
        ),
    )
}
FAMILIES: dict[str, list[str]] = {}
for _s in SCENARIOS.values():
    FAMILIES.setdefault(_s.family, []).append(_s.name)


def resolve_scenarios(scenarios: list[str] | str) -> list[str]:
    """Scenario names from a list or a comma-separated string; family names ("memory", ...) expand to members."""
    names = scenarios.split(",") if isinstance(scenarios, str) else list(scenarios)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if name in SCENARIOS:
            out.append(name)
        elif name in FAMILIES:
            out.extend(FAMILIES[name])
        elif name == "all":
            out.extend(SCENARIOS)
        else:
            known = ", ".join(list(SCENARIOS) + list(FAMILIES) + ["all"])
            raise ValueError(f"unknown scenario {name!r}; choose from {known}")
    if not out:
        raise ValueError("no scenario given")
    return out


def _check_split(split: str) -> int:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return SPLITS.index(split)


def episode(scenario: str, seed: int, index: int, length: int = 12, split: str = "train") -> Episode:
    """Episode `index` of a run with this seed and split (the same one `world generate` writes)."""
    if scenario not in SCENARIOS:
        resolve_scenarios(scenario)  # raises the helpful message
        raise ValueError(f"{scenario!r} is a family; episode() needs one scenario name")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, _check_split(split), index]))
    return simulate(scenario, SCENARIOS[scenario].config, rng, length)


def record(ep: Episode, seed: int, clip: str | None = None) -> dict:
    """One `states.jsonl` line for an episode (clip is None when no video was written)."""
    return {
        "clip": clip,
        "fps": FPS,
        "stride": STRIDE,
        "states": ep.states,
        "predictable": ep.predictable,
        "scenario": ep.scenario,
        "seed": seed,
    }


def sequences(
    scenarios: list[str] | str, n: int, seed: int, length: int = 12, split: str = "train"
) -> list[dict]:
    """`n` state sequences (records like `states.jsonl` lines, "clip": None) without rendering anything.

    Clip i uses scenario `names[i % len(names)]`, exactly as `world generate` does.
    """
    names = resolve_scenarios(scenarios)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [record(episode(names[i % len(names)], seed, i, length, split), seed) for i in range(n)]


def frames_and_states(
    scenarios: list[str] | str, n: int, seed: int, length: int = 12, size: int = 128, split: str = "train"
) -> Iterator[tuple[np.ndarray, str]]:
    """(frame (size, size, 3) uint8, state) pairs at the state instants of `n` sequences, lazily."""
    for rec in sequences(scenarios, n, seed, length, split):
        for state in rec["states"]:
            yield render_state(state, size), state

"""The simulator: a world configuration, per-object motion laws, and `simulate` -> an `Episode`.

Time is measured in states (t = 0, 1, ..., length - 1 are the state instants); video frames sample it finer.
Every law puts objects on integer grid cells at integer t, so a state fully determines its frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from world.grammar import COLOURS, GRID, MAX_TOKENS, SCREEN_COLUMN, SHAPES, Scene, WorldObject, caption
from world.render import draw_frame

MOTIONS = ("bounce", "gravity", "collide", "hide")
LAST = GRID - 1  # the last row / column index: walls sit at 0 and LAST
CHECK_SUBSTEPS = 16  # overlap test resolution (per state); independent of the video frame rate
MIN_GAP = 0.98  # sampled centre distance below which two objects would overlap (sprites are 0.8 cell)
MAX_TRIES = 200


@dataclass(frozen=True)
class WorldConfig:
    """Difficulty knobs of one scenario.

    Args:
        motion: the motion law: "bounce" (constant velocity, walls reflect), "gravity" (balls bounce on the
            floor forever, other shapes fall and rest), "collide" (objects share a row and collide elastically),
            "hide" (one object walks behind the screen, waits there `hide_states` states, walks on).
        min_objects / max_objects: objects present from the first state (drawn uniformly).
        max_speed: 1 or 2 cells per state for "bounce" (speed-2 objects keep to even cells, so a wall bounce
            never looks like a pause).
        lamp: a lamp that is on for `lamp_on` states out of every `lamp_period` (random phase).
        screen: a screen in front of the center column; objects in that column are hidden.
        hide_states: how many states the hider stays behind the screen ("hide" only).
        appear: one extra object appears at a random state (the stochastic family).
    """

    motion: str = "bounce"
    min_objects: int = 1
    max_objects: int = 3
    max_speed: int = 1
    lamp: bool = False
    lamp_period: int = 10
    lamp_on: int = 5
    screen: bool = False
    hide_states: int = 6
    appear: bool = False

    def __post_init__(self) -> None:
        if self.motion not in MOTIONS:
            raise ValueError(f"motion must be one of {MOTIONS}, got {self.motion!r}")
        if not 0 <= self.min_objects <= self.max_objects:
            raise ValueError(
                f"need 0 <= min_objects <= max_objects, got {self.min_objects}, {self.max_objects}"
            )
        if self.max_speed not in (1, 2):
            raise ValueError(f"max_speed must be 1 or 2, got {self.max_speed}")
        if not 0 < self.lamp_on < self.lamp_period:
            raise ValueError(f"need 0 < lamp_on < lamp_period, got {self.lamp_on}, {self.lamp_period}")
        if self.hide_states < 1:
            raise ValueError(f"hide_states must be >= 1, got {self.hide_states}")
        if self.motion == "collide" and self.min_objects < 2:
            raise ValueError("collide needs min_objects >= 2")
        if self.motion == "hide" and not (self.screen and 1 <= self.min_objects):
            raise ValueError("hide needs screen=True and min_objects >= 1")
        if self.max_tokens() > MAX_TOKENS:
            raise ValueError(
                f"the most crowded scene needs {self.max_tokens()} tokens, more than N = {MAX_TOKENS}"
            )

    def max_tokens(self) -> int:
        """Tokens of the most crowded caption: 4 words per object, commas between items, the final '.'."""
        n = self.max_objects + int(self.appear)
        items = n + int(self.screen) + int(self.lamp)
        return 4 * n + int(self.screen) + 2 * int(self.lamp) + max(items - 1, 0) + 1 + int(items == 0)


def fold(u: np.ndarray) -> np.ndarray:
    """Reflect an unbounded coordinate between the walls 0 and LAST (a triangle wave): elastic wall bounces."""
    period = 2 * LAST
    m = np.mod(u, period)
    return np.where(m <= LAST, m, period - m)


class Motion(Protocol):
    def at(self, t: np.ndarray) -> np.ndarray:
        """Grid positions (len(t), 2) as (row, col) at times t (in states)."""
        ...


@dataclass(frozen=True)
class Linear:
    """Constant velocity with elastic walls."""

    row: int
    col: int
    v_row: int
    v_col: int

    def at(self, t: np.ndarray) -> np.ndarray:
        return np.stack([fold(self.row + self.v_row * t), fold(self.col + self.v_col * t)], axis=-1)


@dataclass(frozen=True)
class Ballistic:
    """A ball under gravity (g = 2 cells/state^2) bouncing elastically on the floor, drifting sideways.

    Dropped from rest `drop` = k^2 rows above the floor it lands after k states, so it is on a cell at every
    state instant; `phase` says where in its 2k-state cycle it starts.
    """

    k: int
    phase: int
    col: int
    v_col: int

    def at(self, t: np.ndarray) -> np.ndarray:
        tau = np.mod(t + self.phase, 2 * self.k)
        row = LAST - self.k**2 + (self.k - np.abs(tau - self.k)) ** 2
        return np.stack([row, fold(self.col + self.v_col * t)], axis=-1)


@dataclass(frozen=True)
class Drop:
    """Released from rest at t = 0, falls with g = 2 cells/state^2 and stays on the floor."""

    row: int
    col: int

    def at(self, t: np.ndarray) -> np.ndarray:
        row = np.minimum(self.row + t**2, LAST)
        return np.stack([row, np.full_like(t, float(self.col))], axis=-1)


@dataclass(frozen=True)
class RowCollision:
    """Objects sharing a row, equal masses, elastic collisions at one cell apart (the `index`-th from the left).

    Equal-mass 1-D collisions swap velocities, which is the same as passing through with labels swapped:
    remove each object's width from the track, let 'ghosts' move freely between the walls, sort them, and put
    the widths back. Order along the row never changes.
    """

    row: int
    cols: tuple[int, ...]  # strictly increasing starting columns of the whole group
    velocities: tuple[int, ...]
    index: int

    def at(self, t: np.ndarray) -> np.ndarray:
        n = len(self.cols)
        span = LAST - (n - 1)  # the ghosts' walls are 0 and span
        period = 2 * span
        ghosts = []
        for i, (c, v) in enumerate(zip(self.cols, self.velocities)):
            m = np.mod(c - i + v * t, period)
            ghosts.append(np.where(m <= span, m, period - m))
        ordered = np.sort(np.stack(ghosts), axis=0)  # (n, len(t))
        col = ordered[self.index] + self.index
        return np.stack([np.full_like(t, float(self.row)), col], axis=-1)


@dataclass(frozen=True)
class Path:
    """Integer cells at each state instant, straight lines in between (for walks with waits)."""

    cells: tuple[tuple[int, int], ...]

    def at(self, t: np.ndarray) -> np.ndarray:
        pts = np.asarray(self.cells, dtype=np.float64)  # (L, 2)
        k = np.clip(np.floor(t).astype(int), 0, len(pts) - 1)
        k1 = np.minimum(k + 1, len(pts) - 1)
        w = (t - k)[:, None]
        return pts[k] * (1 - w) + pts[k1] * w


def hide_path(row: int, col: int, v: int, hide_states: int, length: int) -> Path:
    """Walk along a row at one cell per state; behind the screen stay `hide_states` states, then walk on."""
    cells, c, waited = [], col, 0
    for _ in range(length):
        cells.append((row, c))
        if c == SCREEN_COLUMN:
            waited += 1
            if waited < hide_states:
                continue
        waited = 0
        if not 0 <= c + v <= LAST:
            v = -v
        c += v
    return Path(tuple(cells))


@dataclass
class Episode:
    """One simulated clip: who is in it, how each moves, and the resulting states and predictability flags."""

    scenario: str
    config: WorldConfig
    length: int
    identities: list[tuple[str, str]]
    motions: list[Motion]
    appear_at: list[int]  # first state each object is present (0 for the initial objects)
    lamp_phase: int | None
    states: list[str] = field(default_factory=list)
    predictable: list[bool] = field(default_factory=list)

    def positions(self, t: np.ndarray) -> np.ndarray:
        """Grid positions (n_objects, len(t), 2) as (row, col)."""
        return np.stack([m.at(t) for m in self.motions]) if self.motions else np.zeros((0, len(t), 2))

    def lamp_at(self, k: int) -> bool | None:
        if self.lamp_phase is None:
            return None
        return (k + self.lamp_phase) % self.config.lamp_period < self.config.lamp_on

    def scenes(self) -> list[Scene]:
        """The scene at every state instant: present objects outside the screen's column."""
        pos = self.positions(np.arange(self.length, dtype=np.float64))  # (n, L, 2)
        cells = np.rint(pos).astype(int)
        assert np.abs(pos - cells).max(initial=0.0) < 1e-9, "objects sit on cells at state instants"
        out = []
        for k in range(self.length):
            objs = [
                WorldObject(colour, shape, int(cells[i, k, 0]), int(cells[i, k, 1]))
                for i, ((colour, shape), start) in enumerate(zip(self.identities, self.appear_at))
                if k >= start and not (self.config.screen and cells[i, k, 1] == SCREEN_COLUMN)
            ]
            out.append(Scene(tuple(objs), screen=self.config.screen, lamp=self.lamp_at(k)))
        return out

    def frame(self, t: float, size: int = 128) -> np.ndarray:
        """The video frame (size, size, 3) uint8 at time t (in states); hidden objects are drawn behind the screen."""
        k = int(np.floor(t + 1e-9))
        pos = self.positions(np.array([t]))[:, 0]
        placed = [
            (colour, shape, float(r), float(c))
            for (colour, shape), start, (r, c) in zip(self.identities, self.appear_at, pos)
            if t >= start - 1e-9
        ]
        return draw_frame(placed, screen=self.config.screen, lamp=self.lamp_at(k), size=size)

    def frames(self, stride: int, size: int = 128) -> np.ndarray:
        """All video frames (F, size, size, 3), F = (length - 1) * stride + 1; frame k * stride is state k."""
        return np.stack([self.frame(j / stride, size) for j in range((self.length - 1) * stride + 1)])


def _clear(path: np.ndarray, start: int, placed: list[tuple[np.ndarray, int]], t: np.ndarray) -> bool:
    """Whether a candidate path (S, 2) keeps MIN_GAP cells from every placed path while both are present."""
    for other, other_start in placed:
        live = t >= max(start, other_start)
        if np.any(np.hypot(*(path[live] - other[live]).T) < MIN_GAP):
            return False
    return True


def _sample_linear(rng: np.random.Generator, cfg: WorldConfig) -> Linear:
    speed = int(rng.integers(1, cfg.max_speed + 1))
    n_cells = (GRID + speed - 1) // speed  # speed-2 objects keep to even cells
    while True:
        v_row, v_col, row, col = (int(x) for x in rng.integers(0, [3, 3, n_cells, n_cells]))
        v_row, v_col, row, col = (v_row - 1) * speed, (v_col - 1) * speed, row * speed, col * speed
        if (v_row, v_col) == (0, 0):
            continue
        if cfg.screen and v_col == 0 and col == SCREEN_COLUMN:
            continue  # would stay hidden all clip long
        return Linear(row, col, v_row, v_col)


def _sample_one(rng: np.random.Generator, cfg: WorldConfig, shape: str, first: bool, length: int) -> Motion:
    """One object's motion law under the scenario's knobs (not "collide", which moves a whole row at once)."""
    if cfg.motion == "bounce":
        return _sample_linear(rng, cfg)
    if cfg.motion == "gravity":
        col = int(rng.integers(0, GRID))
        if shape == "ball":
            # Drops of 1 or 4 rows (k = 1, 2), the high one twice as often.
            k = int(rng.integers(1, 4)) // 2 + 1
            return Ballistic(k, int(rng.integers(0, 2 * k)), col, int(rng.integers(-1, 2)))
        return Drop(int(rng.integers(0, LAST)), col)
    side = [c for c in range(GRID) if c != SCREEN_COLUMN]
    if first:  # hide: the first object walks behind the screen ...
        row, col = int(rng.integers(0, GRID)), side[int(rng.integers(0, len(side)))]
        return hide_path(row, col, 1 if col < SCREEN_COLUMN else -1, cfg.hide_states, length)
    # ... and the others bounce up and down beside it.
    row, col, v = int(rng.integers(0, GRID)), side[int(rng.integers(0, len(side)))], int(rng.integers(0, 2))
    return Linear(row, col, 2 * v - 1, 0)


def simulate(scenario: str, cfg: WorldConfig, rng: np.random.Generator, length: int = 12) -> Episode:
    """Draw one episode of `length` states from the scenario's distribution (deterministic given `rng`).

    Objects are placed one at a time; a candidate whose path would come within MIN_GAP cells of an object
    already placed is redrawn (up to MAX_TRIES times, after which the scene has one object fewer).
    """
    if length < 2:
        raise ValueError(f"length must be >= 2 states, got {length}")
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1)) + int(cfg.appear)
    # Objects in one scene have different colours (shapes may repeat), which keeps scenes easy to read.
    colours = rng.choice(len(COLOURS), size=n, replace=False)
    shapes = rng.integers(0, len(SHAPES), size=n)
    identities = [(COLOURS[int(c)], SHAPES[int(s)]) for c, s in zip(colours, shapes)]
    appear_at = [0] * n
    if cfg.appear:
        appear_at[-1] = int(rng.integers(2, max(3, length - 1)))
    if cfg.motion == "collide":
        row = int(rng.integers(0, GRID))
        cols = tuple(sorted(int(c) for c in rng.choice(GRID, size=n, replace=False)))
        vels = (0,) * n
        while not any(vels):
            vels = tuple(int(v) - 1 for v in rng.integers(0, 3, size=n))
        # Objects in a row never come closer than one cell, so nothing is redrawn here.
        motions: list[Motion] = [RowCollision(row, cols, vels, i) for i in range(n)]
        kept = list(range(n))
    else:
        t = np.arange((length - 1) * CHECK_SUBSTEPS + 1) / CHECK_SUBSTEPS
        placed: list[tuple[np.ndarray, int]] = []
        motions, kept = [], []
        for i, (_, shape) in enumerate(identities):
            for _ in range(MAX_TRIES):
                m = _sample_one(rng, cfg, shape, i == 0, length)
                path = m.at(t)
                if _clear(path, appear_at[i], placed, t):
                    placed.append((path, appear_at[i]))
                    motions.append(m)
                    kept.append(i)
                    break
    phase = int(rng.integers(0, cfg.lamp_period)) if cfg.lamp else None
    ep = Episode(
        scenario, cfg, length, [identities[i] for i in kept], motions, [appear_at[i] for i in kept], phase
    )
    ep.states = [caption(s) for s in ep.scenes()]
    ep.predictable = _predictable(ep)
    return ep


def _predictable(ep: Episode) -> list[bool]:
    """Whether each state follows from the earlier ones by the world's rules (see docs/world.md).

    Not predictable: state 0 and 1 (initial positions and velocities are random draws first seen there), the
    state where an object appears and the next one (its velocity), and every state up to the lamp's first
    switch (its random phase).
    """
    flags = [k >= 2 for k in range(ep.length)]
    for start in ep.appear_at:
        if start > 0:
            for k in (start, start + 1):
                if k < ep.length:
                    flags[k] = False
    if ep.lamp_phase is not None:
        lamps = [ep.lamp_at(k) for k in range(ep.length)]
        first_switch = next((k for k in range(1, ep.length) if lamps[k] != lamps[k - 1]), ep.length - 1)
        for k in range(first_switch + 1):
            flags[k] = False
    return flags

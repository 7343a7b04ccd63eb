"""The built-in physical world: seeded 2-D scenes, their frames and their canonical semantic states.

Public API: `render_state`, `parse_state`, `caption`, `SCENARIOS`, `sequences`, `frames_and_states`, `episode`.
"""

from world.grammar import (
    COLOURS,
    COLUMNS,
    GRID,
    MAX_TOKENS,
    ROWS,
    SHAPES,
    VOCAB,
    Scene,
    WorldObject,
    caption,
    parse_state,
    tokenize,
)
from world.render import draw_frame, render_scene, render_state
from world.scenarios import (
    FAMILIES,
    FPS,
    SCENARIOS,
    SPLITS,
    STRIDE,
    Scenario,
    episode,
    frames_and_states,
    resolve_scenarios,
    sequences,
)
from world.sim import Episode, WorldConfig, simulate

__all__ = [
    "COLOURS",
    "COLUMNS",
    "FAMILIES",
    "FPS",
    "GRID",
    "MAX_TOKENS",
    "ROWS",
    "SCENARIOS",
    "SHAPES",
    "SPLITS",
    "STRIDE",
    "VOCAB",
    "Episode",
    "Scenario",
    "Scene",
    "WorldConfig",
    "WorldObject",
    "caption",
    "draw_frame",
    "episode",
    "frames_and_states",
    "parse_state",
    "render_scene",
    "render_state",
    "resolve_scenarios",
    "sequences",
    "simulate",
    "tokenize",
]
